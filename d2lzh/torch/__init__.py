"""The PyTorch twin of :mod:`d2lzh.mxnet`: the same names, PyTorch semantics.

``from d2lzh import torch as d2l``. One module per concern:

* :mod:`~d2lzh.torch.book`: the book's API (devices, ``lenet``, ``resnet18``,
  ``split_and_load``, ``allreduce``, ``evaluate_accuracy``, ``setup_report`` ...);
* :mod:`~d2lzh.torch.data`: Fashion-MNIST iterators (host, pinned, GPU; a worker's shard);
* :mod:`~d2lzh.torch.train`: ``train``, the book's loop, and ``train_data_parallel``;
* :mod:`~d2lzh.torch.recipe`: the fast path (beyond the book): ``train_fast`` trains as a
  ``Recipe`` says; ``FAST`` is the one measured fastest to 0.92 test accuracy;
* :mod:`~d2lzh.torch.ddp`: the torchrun worker (``python -m d2lzh.torch.ddp``) and
  :mod:`~d2lzh.torch.launch`: ``run_ddp``, ``measure_allreduce`` from a notebook, both
  imported at the first use of their names (so that ``-m d2lzh.torch.ddp`` runs cleanly);
* :mod:`~d2lzh.torch.settings`: settings dataclasses whose fields are checks and flags.

The data comes from :mod:`d2lzh.data` (no torchvision). Where the book asks for several
GPUs and the machine has none, the CPU stands in (``try_devices(2)`` gives it twice).
"""
import importlib

import torch  # noqa: F401  (part of this module's API: d2l.torch)
import torch.nn.functional as F  # noqa: F401
from torch import nn  # noqa: F401

from ..plot import bar_chart, set_figsize, timeline  # noqa: F401
from ..results import load_reference, output_dir, record  # noqa: F401
from ..timing import Benchmark, Timer, speedup  # noqa: F401
from .book import *  # noqa: F401,F403
from .book import __all__ as _book
from .data import (FashionMNISTIter, ShardIter, choose_max_examples,  # noqa: F401
                   load_data_fashion_mnist)
from .recipe import FAST, Recipe, TrainStep, train_fast  # noqa: F401
from .train import train, train_data_parallel  # noqa: F401

_LAZY = {'ddp_worker': 'd2lzh.torch.ddp', 'Job': 'd2lzh.torch.ddp',
         'run_ddp': 'd2lzh.torch.launch', 'measure_allreduce': 'd2lzh.torch.launch'}
__all__ = ['torch', 'nn', 'F', 'Benchmark', 'Timer', 'speedup', 'record', 'output_dir', 'load_reference',
           'bar_chart', 'set_figsize', 'timeline', *_book, 'FashionMNISTIter', 'ShardIter', 'load_data_fashion_mnist',
           'choose_max_examples', 'train', 'train_data_parallel', 'Recipe', 'FAST',
           'TrainStep', 'train_fast', *_LAZY]


def __getattr__(name):
    if name not in _LAZY:
        raise AttributeError(f"module 'd2lzh.torch' has no attribute {name!r}")
    value = getattr(importlib.import_module(_LAZY[name]), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_LAZY))
