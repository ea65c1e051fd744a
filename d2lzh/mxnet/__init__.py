"""The MXNet edition: the book API of :mod:`~d2lzh.mxnet.book` (:data:`BOOK_NAMES`, imported on
first use); beyond the book :mod:`~d2lzh.mxnet.dist` and :mod:`~d2lzh.mxnet.launch`. Importing it
does not import MXNet: a ps-lite scheduler or server runs its loop inside ``import mxnet``."""
from ..setup import lazy_names

#: The names of :mod:`d2lzh.mxnet.book` (its ``__all__``).
BOOK_NAMES = ('mx', 'nd', 'gluon', 'autograd', 'nn', 'gpu_name', 'try_gpu', 'try_all_gpus',
              'try_devices', 'describe_devices', 'Residual', 'resnet18', 'lenet', 'split_and_load',
              'allreduce', 'get_params', 'sgd', 'evaluate_accuracy', 'FashionMNISTIter',
              'load_data_fashion_mnist', 'choose_max_examples', 'setup_report')
__all__ = list(BOOK_NAMES)
__getattr__, __dir__ = lazy_names(__name__, dict.fromkeys(BOOK_NAMES, __name__ + '.book'))
