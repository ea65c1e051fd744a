"""The PyTorch edition, ``from d2lzh import torch as d2l``: the names of :mod:`d2lzh.mxnet`
with PyTorch semantics (its rooms: docs/architecture.md); ``ddp`` and ``launch`` are imported at
the first use of their names, so that ``python -m d2lzh.torch.ddp`` runs cleanly."""
import torch  # noqa: F401  (part of this module's API: d2l.torch)
import torch.nn.functional as F  # noqa: F401
from torch import nn  # noqa: F401

from ..curves import loss_crossings, smooth_loss  # noqa: F401
from ..data import choose_max_examples  # noqa: F401
from ..jobs import batch_indices  # noqa: F401
from ..plot import bar_chart, set_figsize, timeline  # noqa: F401
from ..results import load_reference, output_dir, record  # noqa: F401
from ..setup import lazy_names
from ..setup.gpus import register_edition
from ..timing import NOISE, Benchmark, Timer, format_ratio, paired_times, speedup  # noqa: F401
from ..trace import draw, events, overlap_ms, torch_ops  # noqa: F401
from .book import *  # noqa: F401,F403
from .book import __all__ as _book
from .data import load_data_fashion_mnist  # noqa: F401
from .measure import (LADDER, cold_start, ladder_configs, ladder_recipe,  # noqa: F401
                      train_ladder_step)
from .recipe import FAST, Recipe, TrainStep, train_fast  # noqa: F401
from .train import train, train_data_parallel  # noqa: F401

_LAZY = {'ddp_worker': 'd2lzh.torch.ddp', 'Job': 'd2lzh.torch.ddp',
         'run_ddp': 'd2lzh.torch.launch', 'measure_allreduce': 'd2lzh.torch.launch'}
__all__ = ['torch', 'nn', 'F', 'Benchmark', 'Timer', 'speedup', 'NOISE', 'format_ratio',
           'paired_times', 'record', 'output_dir', 'load_reference', 'bar_chart', 'set_figsize',
           'timeline', 'events', 'draw', 'overlap_ms', 'torch_ops', 'smooth_loss', 'loss_crossings',
           'batch_indices', *_book, 'load_data_fashion_mnist', 'choose_max_examples', 'train',
           'train_data_parallel', 'Recipe', 'FAST', 'TrainStep', 'train_fast', 'LADDER',
           'ladder_configs', 'ladder_recipe', 'train_ladder_step', 'cold_start', *_LAZY]
__getattr__, __dir__ = lazy_names(__name__, _LAZY)
register_edition('torch', num_gpus)  # noqa: F405  (num_gpus: from .book's star import)
