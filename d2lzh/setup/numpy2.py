"""The numpy names and ``distutils`` that MXNet 1.9.1 needs on today's stacks (beyond the book).

MXNet 1.9.1 (the last release, 2022) reads at import time names numpy has since removed:
``np.bool`` (gone in numpy 1.24: ``AttributeError: module 'numpy' has no attribute 'bool'``)
and, under numpy 2, ``PZERO``, ``NINF``, ``NAN``, ``alltrue``, ``product``, ``round_``,
``in1d``, ``trapz``, ``msort``, ``npv`` ... (``mxnet/numpy/utils.py``, ``fallback.py``,
``mxnet/numpy_dispatch_protocol.py``); and it imports ``distutils``, which Python 3.12 removed.
:func:`prepare`, step 3 of :mod:`d2lzh.setup`'s import hook, fixes both (checked with numpy
2.0-2.5 on Python 3.11-3.13: Gluon training, hybridize/export, ``split_and_load``).
"""
import importlib
import math
import sys
import warnings


def _removed(name):
    """A stand-in for ``numpy.<name>``, a financial function numpy dropped without successor."""
    def stub(*args, **kwargs):
        raise NotImplementedError(
            f'numpy.{name} was removed from numpy; MXNet only re-exports it. Use the '
            f'numpy_financial package (pip install numpy-financial), e.g. '
            f'numpy_financial.{name}(...).')
    stub.__name__ = stub.__qualname__ = name
    stub.__doc__ = f'numpy.{name} (removed) restored for MXNet; raises NotImplementedError.'
    return stub


def restore_numpy_names(np=None):
    """Put back on the numpy module ``np`` (default: ``import numpy``) the names MXNet 1.9.1
    reads and numpy removed, each an alias of today's equivalent (``np.PZERO = 0.0``,
    ``np.alltrue = np.all``, ``np.trapz = np.trapezoid`` ...; the financial functions, dropped
    without replacement, become stubs raising NotImplementedError that name
    ``numpy_financial``). A name numpy still provides, even through a deprecation path, is
    never replaced. Returns the names added (list of str)."""
    if np is None:
        import numpy as np

    def in1d(ar1, ar2, assume_unique=False, invert=False, **kwargs):
        """numpy.in1d as numpy < 2.4 defined it: ``isin`` on the flattened first argument."""
        return np.isin(np.asarray(ar1).ravel(), ar2, assume_unique=assume_unique,
                       invert=invert, **kwargs)

    def msort(a):
        """numpy.msort as numpy < 2 defined it: a copy sorted along the first axis."""
        return np.sort(a, axis=0)

    names = {
        'PZERO': 0.0, 'NZERO': -0.0, 'PINF': math.inf, 'NINF': -math.inf,
        'Inf': math.inf, 'NAN': math.nan, 'NaN': math.nan,
        'float_': np.float64, 'complex_': np.complex128,
        'alltrue': np.all, 'sometrue': np.any, 'product': np.prod, 'round_': np.round,
        'in1d': in1d, 'msort': msort, 'trapz': getattr(np, 'trapezoid', None),
        **{name: _removed(name) for name in ('npv', 'pmt', 'ppmt', 'pv', 'rate', 'mirr')},
    }
    added = []
    if 'bool' not in np.__dict__:
        # numpy 1.24-1.26 lack it (2.x has it again); MXNet uses it as a dtype: the builtin is
        np.bool = bool
        added.append('bool')
    for name, value in names.items():
        with warnings.catch_warnings():   # numpy 1.x still answers some, with a warning
            warnings.simplefilter('ignore')
            if value is None or hasattr(np, name):
                continue
        setattr(np, name, value)
        added.append(name)
    return added


def prepare():
    """Restore the numpy names (:func:`restore_numpy_names`) and make ``distutils``
    importable. Safe to call many times. Returns None. Raises ImportError when numpy is not
    installed, or when Python 3.12+ has no setuptools to provide ``distutils``."""
    restore_numpy_names()
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
