"""The MXNet edition: ``import d2lzh.mxnet`` (or ``import d2lzh as d2l``) gives the book API.

* :mod:`d2lzh.mxnet.book`: the helpers the book's chapters call (devices, ``Residual``,
  ``resnet18``, ``lenet``, ``split_and_load``, ``allreduce``, ``evaluate_accuracy``,
  Fashion-MNIST iterators ...); its names are attributes of this package, imported on
  first use.
* :mod:`d2lzh.mxnet.dist`: every process of a parameter-server (``dist_sync``) job
  (``python -m d2lzh.mxnet.dist``); beyond the book.
* :mod:`d2lzh.mxnet.launch`: MXNet's own launcher with a deadline, supervision and the
  ``dmlc_tracker`` patches (``python -m d2lzh.mxnet.launch``); beyond the book.

Importing this package does not import MXNet: a ps-lite scheduler or server runs its
loop inside ``import mxnet``, so :mod:`~d2lzh.mxnet.dist` must set itself up first, and
the launcher runs where MXNet does not import (Python 3.13).
"""
import importlib

#: The names of :mod:`d2lzh.mxnet.book` (its ``__all__``).
BOOK_NAMES = ('mx', 'nd', 'gluon', 'autograd', 'nn', 'gpu_name', 'try_gpu', 'try_all_gpus',
              'try_devices', 'describe_devices', 'Residual', 'resnet18', 'lenet',
              'split_and_load', 'allreduce', 'get_params', 'sgd', 'evaluate_accuracy',
              'FashionMNISTIter', 'load_data_fashion_mnist', 'choose_max_examples',
              'setup_report')
__all__ = list(BOOK_NAMES)


def __getattr__(name):
    if name not in BOOK_NAMES:
        raise AttributeError(f"module 'd2lzh.mxnet' has no attribute {name!r}")
    value = getattr(importlib.import_module('.book', __name__), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(BOOK_NAMES))
