"""d2lzh: helpers for chapter 8 "计算性能" (and 4.6) of 动手学深度学习.

``import d2lzh as d2l`` gives the MXNet API the book calls (``d2l.Benchmark``, ``d2l.try_gpu``
...), importing MXNet at the first use of a name that needs it; its import hook (:mod:`d2lzh.setup`)
makes ``import mxnet`` work on numpy 1.x and 2.x. Its rooms: docs/architecture.md."""
from . import mxnet as _mxnet  # the names only: MXNet is not imported
from .results import output_dir, record
from .setup import add_import_hook, lazy_names
from .setup.gpus import register_edition
from .timing import NOISE, Benchmark, Timer, format_ratio, speedup

__version__ = '1.1.0'

add_import_hook()  # acts at the first `import mxnet`: the PyTorch edition never pays for it

_LAZY = {  # name -> the module that defines it
    **{name: 'd2lzh.mxnet' for name in _mxnet.BOOK_NAMES},
    **{name: 'd2lzh.plot' for name in ('set_figsize', 'bar_chart', 'timeline')},
    **{name: 'd2lzh.trace' for name in ('draw', 'engine_ops', 'overlap_ms')},
    **{name: 'd2lzh.curves' for name in ('smooth_loss', 'loss_crossings')},
    **{name: 'd2lzh.data' for name in (
        'load_fashion_mnist', 'get_fashion_mnist_labels', 'FashionMNISTNotFoundError',
        'CorruptDataError')},
}

__all__ = ['Benchmark', 'Timer', 'speedup', 'NOISE', 'format_ratio', 'record', 'output_dir', *_LAZY]


__getattr__, __dir__ = lazy_names(__name__, _LAZY)


def _gpus_in_use():
    """How many GPUs this edition can use, or None until its book room (which imports
    MXNet) is imported: that import binds it as ``d2lzh.mxnet.book``."""
    book = vars(_mxnet).get('book')
    return None if book is None else sum(
        device.device_type == 'gpu' for device in book.try_all_gpus())


register_edition('mxnet', _gpus_in_use)
