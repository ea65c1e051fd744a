"""CUDA 11 runtime libraries for ``mxnet-cu112``, from NVIDIA's pip packages (beyond the book).

``mxnet-cu112`` 1.9.1 links against the CUDA 11.2-era runtime (cudart 11, cuBLAS 11,
cuDNN 8, NCCL 2, cuFFT 10, cuRAND 10, cuSOLVER 11, NVRTC 11.2, nvToolsExt 1). Cloud
notebooks (CUDA 12 driver, torch with cu12 libraries) and driver-only servers have none of
them. NVIDIA publishes every one as a pip package; d2lzh installs them with
``pip install --target`` into a folder of their own (:func:`target_dir`), never over the
runtime's torch (the nccl and nvtx packages write the same paths as torch's cu12 ones).

Those folders are on no loader search path, so before a GPU build of MXNet is imported
:func:`preload` loads the libraries from there by path, in dependency order and globally
(``RTLD_GLOBAL``); the dynamic loader then resolves ``libmxnet.so``'s needed libraries
to the copies already loaded. d2lzh calls it from :func:`d2lzh._compat.prepare_mxnet_import`.
The NVIDIA driver (``libcuda.so.1``) must come from the machine; without it
:func:`preload` raises :class:`CudaSetupError`, which names the cause and the fix.

Run as a script, ``python d2lzh/_cuda11.py packages`` prints :data:`PACKAGES` and
``python d2lzh/_cuda11.py target-dir`` prints :func:`target_dir` (used by the Makefile).
"""
import ctypes
import importlib.util
import os
import struct
import sys
from pathlib import Path

# NVIDIA's pip packages providing every CUDA 11 library mxnet-cu112 1.9.1 links against
# (cuSPARSE is linked but never loaded by the code paths d2lzh uses). About 1.6 GB.
PACKAGES = (
    'nvidia-cuda-runtime-cu11==11.8.89',
    'nvidia-cublas-cu11==11.11.3.6',
    'nvidia-cudnn-cu11==8.9.6.50',
    'nvidia-nccl-cu11==2.21.5',
    'nvidia-cufft-cu11==10.9.0.58',
    'nvidia-curand-cu11==10.3.0.86',
    'nvidia-cusolver-cu11==11.4.1.48',
    'nvidia-cuda-nvrtc-cu11==11.8.89',
    'nvidia-nvtx-cu11==11.8.86',
)


def target_dir():
    """The folder the CUDA 11 packages are installed into (``pip install --target``).

    ``$D2LZH_CUDA11_DIR`` if set, else ``<sys.prefix>/d2lzh-cuda11`` (inside the
    running environment, e.g. ``.venv/d2lzh-cuda11``). Returns a :class:`pathlib.Path`;
    the folder may not exist yet.
    """
    return Path(os.environ.get('D2LZH_CUDA11_DIR') or Path(sys.prefix) / 'd2lzh-cuda11')


# The libraries of PACKAGES that mxnet-cu112 loads, in dependency order: (folder under
# ``target_dir()/'nvidia'``, file name = soname). libcublasLt is libcublas's dependency;
# cuDNN and NVRTC find their own sub-libraries next to themselves when they need them.
LIBRARIES = (
    ('cuda_runtime', 'libcudart.so.11.0'),
    ('cuda_nvrtc', 'libnvrtc.so.11.2'),
    ('nvtx', 'libnvToolsExt.so.1'),
    ('cublas', 'libcublasLt.so.11'),
    ('cublas', 'libcublas.so.11'),
    ('cufft', 'libcufft.so.10'),
    ('curand', 'libcurand.so.10'),
    ('cusolver', 'libcusolver.so.11'),
    ('cudnn', 'libcudnn.so.8'),
    ('nccl', 'libnccl.so.2'),
)
DRIVER = 'libcuda.so.1'


class CudaSetupError(ImportError):
    """A GPU build of MXNet is installed but cannot be loaded: no NVIDIA driver, or
    missing CUDA 11 libraries. The message names the cause and the fix."""


def mxnet_library():
    """Path of the ``libmxnet.so`` that ``import mxnet`` would load, found without
    importing MXNet (``$MXNET_LIBRARY_PATH`` first, as MXNet does), or None when no
    MXNet is installed."""
    env = os.environ.get('MXNET_LIBRARY_PATH')
    if env and os.path.isfile(env):
        return Path(env)
    busy, _MXNetGuard.busy = _MXNetGuard.busy, True   # look past the guard below
    try:
        spec = importlib.util.find_spec('mxnet')
    except (ImportError, ValueError):
        return None
    finally:
        _MXNetGuard.busy = busy
    for folder in (spec and spec.submodule_search_locations) or ():
        lib = Path(folder) / 'libmxnet.so'
        if lib.is_file():
            return lib
    return None


def needed_libraries(path):
    """The ``DT_NEEDED`` entries (sonames, e.g. ``'libcuda.so.1'``) of a 64-bit
    little-endian ELF shared library, read from its headers only (``readelf -d``).

    Args:
        path (str or Path): the shared library.

    Returns:
        list of str, in the file's order.

    Raises:
        ValueError: the file is not a 64-bit little-endian ELF file.
        OSError: it cannot be read.
    """
    with open(path, 'rb') as f:
        head = f.read(64)
        if head[:4] != b'\x7fELF' or head[4] != 2 or head[5] != 1:
            raise ValueError(f'{path} is not a 64-bit little-endian ELF file')
        phoff, = struct.unpack_from('<Q', head, 32)
        phentsize, phnum = struct.unpack_from('<HH', head, 54)
        f.seek(phoff)
        table = f.read(phentsize * phnum)
        loads, dynamic = [], None
        for i in range(phnum):
            p_type, _, p_offset, p_vaddr, _, p_filesz = struct.unpack_from(
                '<IIQQQQ', table, i * phentsize)
            if p_type == 1:  # PT_LOAD
                loads.append((p_vaddr, p_offset, p_filesz))
            elif p_type == 2:  # PT_DYNAMIC
                dynamic = (p_offset, p_filesz)
        if dynamic is None:
            return []
        f.seek(dynamic[0])
        raw = f.read(dynamic[1])
        entries = [struct.unpack_from('<qQ', raw, k) for k in range(0, len(raw) - 15, 16)]
        strtab = next((v for t, v in entries if t == 5), None)   # DT_STRTAB (an address)
        strsz = next((v for t, v in entries if t == 10), 0)      # DT_STRSZ
        offset = next((off + strtab - va for va, off, size in loads
                       if strtab is not None and va <= strtab < va + size), None)
        if offset is None:
            return []
        f.seek(offset)
        strings = f.read(strsz)
    return [strings[v:strings.index(b'\0', v)].decode() for t, v in entries if t == 1]


def is_gpu_build(lib=None):
    """True when ``lib`` (default: :func:`mxnet_library`) is a CUDA build of MXNet,
    i.e. it needs the NVIDIA driver's ``libcuda.so.1``."""
    lib = mxnet_library() if lib is None else lib
    try:
        return lib is not None and DRIVER in needed_libraries(lib)
    except (OSError, ValueError):
        return False


def _build_name():
    """'mxnet-cu112 1.9.1' (the distribution that installed the GPU build) or 'MXNet'."""
    from importlib import metadata
    for dist in metadata.distributions():
        name = dist.metadata.get('Name') or ''
        if name.lower().startswith('mxnet-cu'):
            return f'{name} {dist.version}'
    return 'MXNet'


def _pip_fix():
    return (f'{sys.executable} -m pip install --no-deps --upgrade --target '
            f'{target_dir()} ' + ' '.join(PACKAGES))


_handles = []      # the loaded libraries, kept for the life of the process
_preloaded = False
_finder = None


def preload():
    """Load the NVIDIA driver and the CUDA 11 libraries before a GPU build of MXNet
    is imported. Does nothing for a CPU build or when MXNet is not installed; safe to
    call many times (beyond the book).

    The driver ``libcuda.so.1`` is loaded from the loader's usual places. Each library
    of :data:`LIBRARIES` is loaded from ``target_dir()/nvidia/<folder>/lib`` when it is
    there, else by soname (a system CUDA 11). All are loaded with ``RTLD_GLOBAL`` so that
    ``libmxnet.so`` binds to them. When they come from the pip packages, MXNet's start-up
    warnings that the cuDNN and CUDA runtime versions differ from the ones it was built
    with (8.9 and 11.8 vs. 8.x and 11.2: same major version, compatible) are turned off
    unless ``MXNET_CUDNN_LIB_CHECKING`` / ``MXNET_CUDA_LIB_CHECKING`` are set.

    While MXNet is not installed yet, or cannot be loaded, a hook on ``import mxnet``
    (a :data:`sys.meta_path` finder) calls this function again at that import, so that
    MXNet installed after ``import d2lzh`` (a notebook's setup cell) is handled too.

    Raises:
        CudaSetupError (an ImportError): the driver is missing (no NVIDIA driver, or a
            cloud runtime without a GPU), or a CUDA 11 library that ``libmxnet.so`` needs
            is found neither in :func:`target_dir` nor on the system. After it, a plain
            ``import mxnet`` raises the same error instead of ``OSError: libcuda.so.1``,
            until the cause is fixed.
    """
    global _preloaded
    if _preloaded:
        return
    lib = mxnet_library()
    if lib is None:                  # not installed (yet): look again at `import mxnet`
        _install_guard()
        return
    if is_gpu_build(lib):
        try:
            _load()
        except CudaSetupError:
            _install_guard()         # `import mxnet` raises this error, not an OSError
            raise
    _preloaded = True
    _remove_guard()


def _load():
    try:
        handles = [ctypes.CDLL(DRIVER, mode=ctypes.RTLD_GLOBAL)]
    except OSError as err:
        raise CudaSetupError(
            f'{_build_name()} is a GPU build of MXNet: it needs the NVIDIA driver '
            f'({DRIVER}), which this machine does not have ({err}). '
            'On Colab, Kaggle or Studio Lab, switch the runtime to a GPU; on a server with '
            'an NVIDIA GPU, install the NVIDIA driver; on a machine without one, use the '
            'CPU build: `pip uninstall -y mxnet-cu112 && pip install --no-deps mxnet==1.9.1` '
            '(or `make venv`).') from None
    needed = set(needed_libraries(mxnet_library()))
    base = target_dir() / 'nvidia'
    missing, from_pip = [], False
    for folder, name in LIBRARIES:
        path = base / folder / 'lib' / name
        try:
            if path.is_file():
                handles.append(ctypes.CDLL(str(path), mode=ctypes.RTLD_GLOBAL))
                from_pip = True
            else:
                handles.append(ctypes.CDLL(name, mode=ctypes.RTLD_GLOBAL))
        except OSError as err:
            if name in needed or path.is_file():
                missing.append(f'{name} ({err})' if path.is_file() else name)
    if missing:
        raise CudaSetupError(
            f'{_build_name()} is a GPU build of MXNet and needs the CUDA 11 libraries, '
            f'but {", ".join(missing)} could not be loaded: neither in {target_dir()} '
            f'(NVIDIA\'s pip packages) nor on the system. Install them: `{_pip_fix()}` '
            '(`make venv MXNET_PACKAGE=mxnet-cu112` does it for .venv).')
    if from_pip:
        os.environ.setdefault('MXNET_CUDNN_LIB_CHECKING', '0')
        os.environ.setdefault('MXNET_CUDA_LIB_CHECKING', '0')
    _handles.extend(handles)


class _MXNetGuard:
    """A meta path finder that runs :func:`preload` when ``mxnet`` is imported, until
    it has succeeded once; it finds nothing itself (the normal finders import mxnet)."""

    busy = False   # True while mxnet_library() looks mxnet up

    @classmethod
    def find_spec(cls, fullname, path=None, target=None):
        if fullname == 'mxnet' and not cls.busy:
            preload()        # raises CudaSetupError while MXNet cannot be loaded


def _install_guard():
    global _finder
    if _finder is None and 'mxnet' not in sys.modules:
        _finder = _MXNetGuard()
        sys.meta_path.insert(0, _finder)


def _remove_guard():
    global _finder
    if _finder is not None and _finder in sys.meta_path:
        sys.meta_path.remove(_finder)
    _finder = None


def no_gpu_warning():
    """The warning to give when a GPU build of MXNet, loaded by :func:`preload`, sees no
    GPU: the CUDA runtime's reason (e.g. ``cudaErrorNoDevice``) and what to do. None when
    MXNet is a CPU build or the runtime sees a GPU. Beyond the book."""
    if not _handles:
        return None
    try:
        cudart = ctypes.CDLL('libcudart.so.11.0')   # the copy preload() loaded
    except OSError:
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


if __name__ == '__main__':
    commands = {'packages': lambda: print('\n'.join(PACKAGES)),
                'target-dir': lambda: print(target_dir())}
    if len(sys.argv) != 2 or sys.argv[1] not in commands:
        sys.exit(f'usage: python {sys.argv[0]} {{{"|".join(commands)}}}')
    commands[sys.argv[1]]()
