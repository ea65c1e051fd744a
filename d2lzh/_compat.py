"""Make MXNet 1.9.1 importable on today's Python and numpy.

MXNet 1.9.1 (the last release, 2022) has two problems on current stacks:

* it uses ``np.bool``, an alias numpy removed in 1.24 (``AttributeError:
  module 'numpy' has no attribute 'bool'``);
* it imports ``distutils``, which Python 3.12 removed (``ModuleNotFoundError:
  No module named 'distutils'``); setuptools ships a replacement.

:func:`prepare_mxnet_import` fixes both in the running process. d2lzh calls it
before it imports MXNet, so ``import d2lzh`` followed by ``import mxnet`` works
on Python 3.10, 3.11 and 3.12. It changes nothing else.
"""
import importlib
import sys

_prepared = False


def prepare_mxnet_import():
    """Restore what MXNet 1.9.1 expects from numpy and the standard library.

    Safe to call many times. Returns None.

    Raises:
        ImportError: numpy >= 2 is installed (MXNet 1.9.1 cannot work with it;
            install the versions in requirements.txt), or Python 3.12+ has no
            setuptools to provide ``distutils`` (``pip install setuptools``).
    """
    global _prepared
    if _prepared:
        return
    from ._cuda11 import preload
    preload()  # a GPU build of MXNet: load the driver and the CUDA 11 libraries first
    import numpy as np

    major = int(np.__version__.split('.')[0])
    if major >= 2:
        raise ImportError(
            f'numpy {np.__version__} is installed, but MXNet 1.9.1 needs numpy < 2. '
            'Run `make run` (it builds .venv from requirements.txt) or '
            '`pip install -r requirements.txt`.')
    if 'bool' not in np.__dict__:
        # numpy 1.24+ dropped the alias; MXNet only uses it as a dtype name.
        np.bool = bool
    try:
        importlib.import_module('distutils.version')
    except ImportError:
        try:
            importlib.import_module('setuptools')  # installs the distutils shim
            importlib.import_module('distutils.version')
        except ImportError as err:
            raise ImportError(
                f'Python {sys.version_info.major}.{sys.version_info.minor} has no '
                'distutils and setuptools is missing, but MXNet 1.9.1 imports '
                'distutils. Install it: `pip install setuptools`.') from err
    _prepared = True


def import_mxnet():
    """Import and return the ``mxnet`` module after :func:`prepare_mxnet_import`."""
    prepare_mxnet_import()
    import mxnet
    return mxnet
