"""CUDA 11 runtime libraries for ``mxnet-cu112``, from NVIDIA's pip packages (beyond the book).

``mxnet-cu112`` 1.9.1 links against the CUDA 11.2-era runtime (cudart 11, cuBLAS 11,
cuDNN 8, NCCL 2, cuFFT 10, cuRAND 10, cuSOLVER 11, NVRTC 11.2, nvToolsExt 1). Cloud
notebooks (CUDA 12 driver, torch with cu12 libraries) and driver-only servers have none of
them. NVIDIA publishes every one as a pip package; d2lzh installs them with
``pip install --target`` into a folder of their own (:func:`target_dir`), never over the
runtime's torch (the nccl and nvtx packages write the same paths as torch's cu12 ones).
"""
import os
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
