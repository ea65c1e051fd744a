"""d2lzh: helpers for chapter 8 "计算性能" (and 4.6) of 动手学深度学习.

``import d2lzh as d2l`` gives the MXNet API the book calls (``d2l.Benchmark``,
``d2l.try_gpu``, ``d2l.resnet18``, ``d2l.load_data_fashion_mnist`` ...).
MXNet is imported only when a name that needs it is first used. ``import d2lzh`` adds
the import hook of :mod:`d2lzh.setup`, which makes MXNet 1.9.1 importable on numpy 1.x and
2.x and Python 3.10-3.13 (and loads mxnet-cu112's CUDA 11 libraries) when it is imported, so
after ``import d2lzh`` a plain ``import mxnet`` works too.

Modules: :mod:`d2lzh.data` (Fashion-MNIST files, numpy), :mod:`d2lzh.timing`
(Benchmark, Timer), :mod:`d2lzh.plot`, :mod:`d2lzh.results` and
:mod:`d2lzh.mxnet` (everything that needs MXNet), :mod:`d2lzh.torch` (the PyTorch twin),
:mod:`d2lzh.setup` (what makes a runtime able to import a framework: the setup cell's
install, the import hook), :mod:`d2lzh.checks`, :mod:`d2lzh.jobs` (what both editions'
distributed workers share) and :mod:`d2lzh.project` (the notebook registry).
"""
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
