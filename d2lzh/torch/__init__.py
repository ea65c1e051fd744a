"""The PyTorch twin of :mod:`d2lzh.mxnet`: the same names, PyTorch semantics.

``from d2lzh import torch as d2l`` gives ``Benchmark``, ``try_gpu``,
``try_all_gpus``, ``try_devices``, ``Residual``, ``resnet18``,
``evaluate_accuracy``, ``load_data_fashion_mnist``, ``split_and_load``,
``allreduce``, ``get_params``, ``sgd``, the training loops used by the
notebooks (``train``, ``train_data_parallel``) and DistributedDataParallel
(``run_ddp``, ``ddp_worker``, ``measure_allreduce``; the worker runs under
``torchrun -m d2lzh.torch.distributed``). The data comes from :mod:`d2lzh.data` (same
search order, verification and ``$D2LZH_MAX_EXAMPLES``); torchvision is not
needed. PyTorch >= 2.4 is supported; it is an optional extra of d2lzh.

Devices: a ``torch.device``. Where the book asks for several GPUs and the
machine has none, the CPU stands in (``try_devices(2)`` gives the CPU twice).

One module per concern:

* :mod:`d2lzh.torch.book`: the book's API (devices, models, split/allreduce,
  evaluation, ``setup_report``);
* :mod:`d2lzh.torch.iterators`: Fashion-MNIST minibatch iterators;
* :mod:`d2lzh.torch.training`: ``train`` (the one epoch loop, also of every
  DistributedDataParallel process) and ``train_data_parallel``;
* :mod:`d2lzh.torch.fast`: ``FAST_RECIPE``, the option set of ``train``
  measured fastest to 0.92 test accuracy, and its fused SGD (beyond the book);
* :mod:`d2lzh.torch.distributed`: DistributedDataParallel (imported on first
  use of its names, so that ``python -m d2lzh.torch.distributed`` runs cleanly).
"""
import importlib

import torch  # noqa: F401  (part of this module's API: d2l.torch)
import torch.nn.functional as F  # noqa: F401
from torch import nn  # noqa: F401

from ..plot import bar_chart, set_figsize  # noqa: F401
from ..results import load_reference, record  # noqa: F401
from ..timing import Benchmark, Timer  # noqa: F401
from .book import (Residual, allreduce, evaluate_accuracy, get_params, gpu_name,  # noqa: F401
                   num_gpus, resnet18, setup_report, sgd, split_and_load, synchronize,
                   try_all_gpus, try_devices, try_gpu)
from .iterators import FashionMNISTIter, choose_max_examples, load_data_fashion_mnist  # noqa: F401
from .training import train, train_data_parallel  # noqa: F401
from .fast import FAST_BATCH_SIZE, FAST_EPOCHS, FAST_LR, FAST_RECIPE  # noqa: F401

_LAZY = {name: 'd2lzh.torch.distributed'
         for name in ('run_ddp', 'ddp_worker', 'measure_allreduce')}

__all__ = ['torch', 'nn', 'F', 'Benchmark', 'Timer', 'record', 'load_reference', 'bar_chart',
           'set_figsize', 'gpu_name', 'num_gpus', 'try_gpu', 'try_all_gpus', 'try_devices',
           'synchronize',
           'Residual', 'resnet18', 'split_and_load', 'allreduce', 'get_params', 'sgd',
           'evaluate_accuracy', 'FashionMNISTIter', 'load_data_fashion_mnist',
           'choose_max_examples', 'train', 'train_data_parallel', 'run_ddp', 'ddp_worker',
           'measure_allreduce', 'setup_report', 'FAST_RECIPE', 'FAST_BATCH_SIZE', 'FAST_EPOCHS',
           'FAST_LR']


def __getattr__(name):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'd2lzh.torch' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_LAZY))
