"""d2lzh: helpers for chapter 8 "计算性能" (and 4.6) of 动手学深度学习.

``import d2lzh as d2l`` gives the MXNet API the book calls (``d2l.Benchmark``, ``d2l.try_gpu``
...), importing MXNet at the first use of a name that needs it; its import hook (:mod:`d2lzh.setup`)
makes ``import mxnet`` work on numpy 1.x and 2.x. Its rooms: docs/architecture.md."""
from .mxnet import BOOK_NAMES as _MXNET_NAMES  # the names only: MXNet is not imported
from .results import output_dir, record
from .setup import add_import_hook, lazy_names
from .timing import NOISE, Benchmark, Timer, format_ratio, speedup

__version__ = '1.1.0'

add_import_hook()  # acts at the first `import mxnet`: the PyTorch edition never pays for it

_LAZY = {  # name -> the module that defines it
    **{name: 'd2lzh.mxnet' for name in _MXNET_NAMES},
    **{name: 'd2lzh.plot' for name in ('set_figsize', 'bar_chart', 'timeline')},
    **{name: 'd2lzh.trace' for name in ('draw', 'engine_ops', 'overlap_ms')},
    **{name: 'd2lzh.curves' for name in ('smooth_loss', 'loss_crossings')},
    **{name: 'd2lzh.data' for name in (
        'load_fashion_mnist', 'get_fashion_mnist_labels', 'FashionMNISTNotFoundError',
        'CorruptDataError')},
}

__all__ = ['Benchmark', 'Timer', 'speedup', 'NOISE', 'format_ratio', 'record', 'output_dir', *_LAZY]


__getattr__, __dir__ = lazy_names(__name__, _LAZY)
