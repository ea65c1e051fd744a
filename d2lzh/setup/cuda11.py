"""CUDA 11 runtime libraries for ``mxnet-cu112`` 1.9.1, which cloud notebooks (CUDA 12 driver,
torch's cu12 libraries) and driver-only servers lack (beyond the book): NVIDIA's pip packages
(:data:`PACKAGES`) go into a folder of their own (:func:`target_dir`; their nccl and nvtx files
collide with torch's), where :func:`preload`, step 2 of :mod:`d2lzh.setup`'s import hook, loads
them. The NVIDIA driver must come from the machine."""
import ctypes
import importlib.machinery
import os
import sys
from pathlib import Path

from . import installed_mxnet

# NVIDIA's pip packages of every CUDA 11 library mxnet-cu112 1.9.1 loads (1.6 GB; not cuSPARSE,
# which it links but never loads on the code paths d2lzh uses).
PACKAGES = (
    'nvidia-cuda-runtime-cu11==11.8.89', 'nvidia-cublas-cu11==11.11.3.6',
    'nvidia-cudnn-cu11==8.9.6.50', 'nvidia-nccl-cu11==2.21.5', 'nvidia-cufft-cu11==10.9.0.58',
    'nvidia-curand-cu11==10.3.0.86', 'nvidia-cusolver-cu11==11.4.1.48',
    'nvidia-cuda-nvrtc-cu11==11.8.89', 'nvidia-nvtx-cu11==11.8.86')
# (folder under target_dir()/'nvidia', soname) in dependency order (libcublasLt: libcublas's);
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


def gpu_build():
    """The installed GPU build of MXNet, e.g. ``'mxnet-cu112 1.9.1'`` (str; a ``mxnet-cu*``
    distribution, :func:`d2lzh.setup.installed_mxnet`), or None: a CPU build or none."""
    dist = installed_mxnet()
    return ' '.join(dist) if dist and dist[0].startswith('mxnet-cu') else None


def preload():
    """If MXNet is a GPU build (:func:`gpu_build`), load the NVIDIA driver, then each library of
    :data:`LIBRARIES` from ``target_dir()/nvidia/<folder>/lib``, else by soname (a system CUDA
    11), all ``RTLD_GLOBAL``, once. With pip's libraries, MXNet's warnings that cuDNN 8.9 / CUDA
    11.8 are not what it was built with (compatible) are off (``MXNET_CUDA_LIB_CHECKING`` ...).
    Returns False when no MXNet is installed (yet), else True. Raises :class:`CudaSetupError`
    without the driver or with a library missing."""
    if importlib.machinery.PathFinder.find_spec('mxnet') is None:   # sys.path's, not hooks'
        return False
    if _handles or (build := gpu_build()) is None:
        return True
    try:
        handles = {DRIVER: ctypes.CDLL(DRIVER, mode=ctypes.RTLD_GLOBAL)}
    except OSError as err:
        raise CudaSetupError(
            f'{build} 是 MXNet 的 GPU 版：它需要 NVIDIA 驱动（{DRIVER}），这台机器却没有（{err}）。'
            '在 Colab、Kaggle 或 Studio Lab 上，请把运行时换成带 GPU 的；在有 NVIDIA GPU 的服务器'
            '上，请安装 NVIDIA 驱动；在没有 NVIDIA GPU 的机器上，请改用 CPU 版：`pip uninstall -y '
            'mxnet-cu112 && pip install --no-deps mxnet==1.9.1`（或 `make venv`）。') from None
    missing, from_pip = [], False
    for folder, name in LIBRARIES:
        path = target_dir() / 'nvidia' / folder / 'lib' / name
        try:
            handles[name] = ctypes.CDLL(str(path) if path.is_file() else name,
                                        mode=ctypes.RTLD_GLOBAL)
            from_pip = from_pip or path.is_file()
        except OSError as err:
            missing.append(f'{name}（{err}）' if path.is_file() else name)
    if missing:
        raise CudaSetupError(
            f'{build} 是 MXNet 的 GPU 版，需要 CUDA 11 的库，但无法加载 {", ".join(missing)}：'
            f'它们既不在 {target_dir()}（NVIDIA 的 pip 包）中，也不在系统里。请把它们装到那里：'
            f'`{sys.executable} -m d2lzh.setup.install cuda11`（约 1.6 GB；'
            '`make venv MXNET_PACKAGE=mxnet-cu112` 会为 .venv 装好）。')
    if from_pip:
        os.environ.setdefault('MXNET_CUDNN_LIB_CHECKING', '0')
        os.environ.setdefault('MXNET_CUDA_LIB_CHECKING', '0')
    _handles.update(handles)
    return True


def no_gpu_warning():
    """The warning (str) when the GPU build :func:`preload` loaded sees no GPU: the CUDA
    runtime's reason (e.g. ``cudaErrorNoDevice``) and what to do; None otherwise."""
    if (cudart := _handles.get('libcudart.so.11.0')) is None:
        return None
    count = ctypes.c_int(0)
    if (code := cudart.cudaGetDeviceCount(ctypes.byref(count))) == 0 and count.value > 0:
        return None
    if code == 0:
        reason = 'CUDA 运行时报告 0 块 GPU'
    else:
        cudart.cudaGetErrorName.restype = cudart.cudaGetErrorString.restype = ctypes.c_char_p
        reason = (f'{cudart.cudaGetErrorName(code).decode()}: '
                  f'{cudart.cudaGetErrorString(code).decode()}')
    fix = ('请更新 NVIDIA 驱动：CUDA 11 的库需要 450.80.02 或更新的版本（建议用 520 或更新的，'
           '即 CUDA 11.8 的驱动）。' if code == 35  # InsufficientDriver
           else '在云端笔记本上，把运行时换成带 GPU 的；在没有 NVIDIA GPU 的机器上，'
           '应安装 CPU 版 `mxnet`。')
    return f'{gpu_build()} 是 MXNet 的 GPU 版，却找不到 GPU（{reason}）。改用 CPU。{fix}'
