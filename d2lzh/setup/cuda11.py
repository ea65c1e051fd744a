"""CUDA 11 runtime libraries for ``mxnet-cu112``, from NVIDIA's pip packages (beyond the book).

``mxnet-cu112`` 1.9.1 links against the CUDA 11.2-era runtime, which cloud notebooks (CUDA 12
driver, torch's cu12 libraries) and driver-only servers lack. NVIDIA's pip packages
(:data:`PACKAGES`) go into a folder of their own (:func:`target_dir`), never over torch (their
nccl and nvtx files collide with torch's cu12 ones). No loader looks there, so :func:`preload`
(step 2 of :mod:`d2lzh.setup`'s import hook) loads them by path, globally, in dependency order
before MXNet is imported. The NVIDIA driver (``libcuda.so.1``) must come from the machine.
"""
import ctypes
import importlib.machinery
import mmap
import os
import struct
import sys
from pathlib import Path

# NVIDIA's pip packages providing every CUDA 11 library mxnet-cu112 1.9.1 links against
# (cuSPARSE is linked but never loaded by the code paths d2lzh uses). About 1.6 GB.
PACKAGES = (
    'nvidia-cuda-runtime-cu11==11.8.89', 'nvidia-cublas-cu11==11.11.3.6',
    'nvidia-cudnn-cu11==8.9.6.50', 'nvidia-nccl-cu11==2.21.5', 'nvidia-cufft-cu11==10.9.0.58',
    'nvidia-curand-cu11==10.3.0.86', 'nvidia-cusolver-cu11==11.4.1.48',
    'nvidia-cuda-nvrtc-cu11==11.8.89', 'nvidia-nvtx-cu11==11.8.86')
# The libraries of PACKAGES that mxnet-cu112 loads, in dependency order: (folder under
# ``target_dir()/'nvidia'``, file name = soname). libcublasLt is libcublas's dependency;
# cuDNN and NVRTC find their own sub-libraries next to themselves when they need them.
LIBRARIES = (
    ('cuda_runtime', 'libcudart.so.11.0'), ('cuda_nvrtc', 'libnvrtc.so.11.2'),
    ('nvtx', 'libnvToolsExt.so.1'), ('cublas', 'libcublasLt.so.11'),
    ('cublas', 'libcublas.so.11'), ('cufft', 'libcufft.so.10'), ('curand', 'libcurand.so.10'),
    ('cusolver', 'libcusolver.so.11'), ('cudnn', 'libcudnn.so.8'), ('nccl', 'libnccl.so.2'))
DRIVER = 'libcuda.so.1'

_handles = {}      # soname -> the loaded library, kept for the life of the process


class CudaSetupError(ImportError):
    """A GPU build of MXNet cannot be loaded (no driver, or a CUDA 11 library missing); the
    message names the cause and the fix."""


def target_dir():
    """The folder (pathlib.Path, may not exist yet) the CUDA 11 packages go into:
    ``$D2LZH_CUDA11_DIR`` if set, else ``<sys.prefix>/d2lzh-cuda11`` (``.venv/d2lzh-cuda11``)."""
    return Path(os.environ.get('D2LZH_CUDA11_DIR') or Path(sys.prefix) / 'd2lzh-cuda11')


def mxnet_library():
    """Path of the ``libmxnet.so`` that ``import mxnet`` would load (``$MXNET_LIBRARY_PATH``,
    else the ``mxnet`` package on ``sys.path``; MXNet is not imported), or None."""
    env = os.environ.get('MXNET_LIBRARY_PATH')
    if env and os.path.isfile(env):
        return Path(env)
    spec = importlib.machinery.PathFinder.find_spec('mxnet')   # sys.path's, not the hooks'
    libs = [Path(d) / 'libmxnet.so' for d in (spec and spec.submodule_search_locations) or ()]
    return next((lib for lib in libs if lib.is_file()), None)


def needed_libraries(path):
    """The ``DT_NEEDED`` entries (sonames, e.g. ``'libcuda.so.1'``) of a 64-bit
    little-endian ELF shared library, in the file's order (list of str), read from its headers
    only, as ``readelf -d`` does. Raises ValueError for another kind of file, OSError when it
    cannot be read."""
    with open(path, 'rb') as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
        if m[:4] != b'\x7fELF' or m[4:6] != b'\x02\x01':
            raise ValueError(f'{path} is not a 64-bit little-endian ELF file')
        phoff, = struct.unpack_from('<Q', m, 32)
        phentsize, phnum = struct.unpack_from('<HH', m, 54)
        # program headers: (p_type, p_flags, p_offset, p_vaddr, p_paddr, p_filesz)
        segments = [struct.unpack_from('<IIQQQQ', m, phoff + i * phentsize) for i in range(phnum)]
        _, _, start, _, _, size = next((s for s in segments if s[0] == 2), (2, 0, 0, 0, 0, 0))
        entries = [struct.unpack_from('<qQ', m, k) for k in range(start, start + size - 15, 16)]
        strtab, strsz = dict(entries).get(5), dict(entries).get(10, 0)   # DT_STRTAB, DT_STRSZ
        base = next((off + strtab - va for kind, _, off, va, _, filesz in segments   # PT_LOAD
                     if kind == 1 and strtab is not None and va <= strtab < va + filesz), None)
        return [] if base is None else [m[base + v:m.find(b'\0', base + v, base + strsz)].decode()
                                        for t, v in entries if t == 1]   # DT_NEEDED


def is_gpu_build(lib=None):
    """Whether ``lib`` (default :func:`mxnet_library`) is a CUDA build: needs ``libcuda.so.1``."""
    lib = mxnet_library() if lib is None else lib
    try:
        return lib is not None and DRIVER in needed_libraries(lib)
    except (OSError, ValueError):
        return False


def _build_name():
    """'mxnet-cu112 1.9.1' (the distribution that installed the GPU build) or 'MXNet'."""
    from . import installed_mxnet
    dist = installed_mxnet()
    return f'{dist[0]} {dist[1]}' if dist and dist[0].startswith('mxnet-cu') else 'MXNet'


def preload():
    """Load the NVIDIA driver and the CUDA 11 libraries if MXNet is a GPU build; return False
    when no MXNet is installed (yet), else True. Safe to call many times.

    The driver comes from the loader's usual places; each library of :data:`LIBRARIES` from
    ``target_dir()/nvidia/<folder>/lib``, else by soname (a system CUDA 11); all with
    ``RTLD_GLOBAL``. From the pip packages, MXNet's warnings that cuDNN 8.9 and CUDA 11.8 are
    not the 8.x and 11.2 it was built with (compatible) are turned off unless
    ``MXNET_CUDNN_LIB_CHECKING`` / ``MXNET_CUDA_LIB_CHECKING`` are set. Raises
    :class:`CudaSetupError` without the driver, or without a library ``libmxnet.so`` needs."""
    lib = mxnet_library()
    if _handles or lib is None or not is_gpu_build(lib):
        return lib is not None
    try:
        handles = {DRIVER: ctypes.CDLL(DRIVER, mode=ctypes.RTLD_GLOBAL)}
    except OSError as err:
        raise CudaSetupError(
            f'{_build_name()} is a GPU build of MXNet: it needs the NVIDIA driver '
            f'({DRIVER}), which this machine does not have ({err}). '
            'On Colab, Kaggle or Studio Lab, switch the runtime to a GPU; on a server with '
            'an NVIDIA GPU, install the NVIDIA driver; on a machine without one, use the '
            'CPU build: `pip uninstall -y mxnet-cu112 && pip install --no-deps mxnet==1.9.1` '
            '(or `make venv`).') from None
    needed, missing, from_pip = set(needed_libraries(lib)), [], False
    for folder, name in LIBRARIES:
        path = target_dir() / 'nvidia' / folder / 'lib' / name
        try:
            handles[name] = ctypes.CDLL(str(path) if path.is_file() else name,
                                        mode=ctypes.RTLD_GLOBAL)
            from_pip = from_pip or path.is_file()
        except OSError as err:
            if name in needed or path.is_file():
                missing.append(f'{name} ({err})' if path.is_file() else name)
    if missing:
        raise CudaSetupError(
            f'{_build_name()} is a GPU build of MXNet and needs the CUDA 11 libraries, '
            f'but {", ".join(missing)} could not be loaded: neither in {target_dir()} '
            f'(NVIDIA\'s pip packages) nor on the system. Install them there: '
            f'`{sys.executable} -m d2lzh.setup.install cuda11` (about 1.6 GB; '
            '`make venv MXNET_PACKAGE=mxnet-cu112` does it for .venv).')
    if from_pip:
        os.environ.setdefault('MXNET_CUDNN_LIB_CHECKING', '0')
        os.environ.setdefault('MXNET_CUDA_LIB_CHECKING', '0')
    _handles.update(handles)
    return True


def no_gpu_warning():
    """The warning (str) when the GPU build :func:`preload` loaded sees no GPU: the CUDA
    runtime's reason (e.g. ``cudaErrorNoDevice``) and what to do; None otherwise."""
    cudart = _handles.get('libcudart.so.11.0')
    if cudart is None:
        return None
    count = ctypes.c_int(0)
    code = cudart.cudaGetDeviceCount(ctypes.byref(count))
    if code == 0 and count.value > 0:
        return None
    if code == 0:
        reason = 'the CUDA runtime reports 0 GPUs'
    else:
        cudart.cudaGetErrorName.restype = ctypes.c_char_p
        cudart.cudaGetErrorString.restype = ctypes.c_char_p
        reason = (f'{cudart.cudaGetErrorName(code).decode()}: '
                  f'{cudart.cudaGetErrorString(code).decode()}')
    if code == 35:  # cudaErrorInsufficientDriver
        fix = ('Update the NVIDIA driver: the CUDA 11 libraries need 450.80.02 or newer '
               '(520 or newer, the driver of CUDA 11.8, recommended).')
    else:
        fix = ('On a cloud notebook, switch the runtime to a GPU; on a machine without an '
               'NVIDIA GPU, the CPU build `mxnet` is the one to install.')
    return (f'{_build_name()} is a GPU build of MXNet but finds no GPU ({reason}). '
            f'Falling back to the CPU. {fix}')
