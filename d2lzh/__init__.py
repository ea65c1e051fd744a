"""d2lzh: helpers for chapter 8 "计算性能" (and 4.6) of 动手学深度学习.

``import d2lzh as d2l`` gives the MXNet API the book calls (``d2l.Benchmark``, ``d2l.try_gpu``,
``d2l.resnet18``, ``d2l.load_data_fashion_mnist`` ...), importing MXNet only when a name that
needs it is first used; its import hook (:mod:`d2lzh.setup`) makes a plain ``import mxnet`` work
on numpy 1.x and 2.x too. The rooms (modules), their floors and who imports whom:
docs/architecture.md."""
from .mxnet import BOOK_NAMES as _MXNET_NAMES  # the names only: MXNet is not imported
from .results import output_dir, record
from .setup import add_import_hook, lazy_names
from .timing import Benchmark, Timer, speedup

__version__ = '1.1.0'

add_import_hook()  # acts at the first `import mxnet`: the PyTorch edition never pays for it

_LAZY = {
    # name -> module that defines it
    **{name: 'd2lzh.mxnet' for name in _MXNET_NAMES},
    **{name: 'd2lzh.plot' for name in ('set_figsize', 'bar_chart', 'timeline')},
    **{name: 'd2lzh.data' for name in (
        'load_fashion_mnist', 'get_fashion_mnist_labels', 'FashionMNISTNotFoundError',
        'CorruptDataError')},
}

__all__ = ['Benchmark', 'Timer', 'speedup', 'record', 'output_dir', *_LAZY]


__getattr__, __dir__ = lazy_names(__name__, _LAZY)
