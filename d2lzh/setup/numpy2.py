"""The numpy names and ``distutils`` that MXNet 1.9.1 (2022, the last release) needs today
(beyond the book): it reads names numpy has since removed (``np.bool`` in numpy 1.24-1.26;
``PZERO``, ``alltrue``, ``in1d``, ``npv`` ... in numpy 2) and imports ``distutils``, gone in
Python 3.12. :func:`prepare`, step 3 of :mod:`d2lzh.setup`'s import hook, fixes both (checked
with numpy 2.0-2.5 on Python 3.11-3.13: Gluon training, hybridize/export, ``split_and_load``)."""
import importlib
import math
import sys
import warnings


def _removed(name):
    """A stand-in for ``numpy.<name>``, a financial function numpy dropped without successor."""
    def stub(*args, **kwargs):
        raise NotImplementedError(f'numpy.{name} 已从 numpy 中删去（MXNet 只是转手导出它）：'
                                  f'请改用 numpy_financial.{name}（pip install numpy-financial）。')
    stub.__name__ = stub.__qualname__ = name
    return stub


def restore_numpy_names(np=None):
    """Put back on numpy (``np``; default: ``import numpy``) the names MXNet 1.9.1 reads and
    numpy removed: aliases of today's equivalents (``np.alltrue = np.all`` ...), and for the
    dropped financial functions stubs that raise NotImplementedError naming ``numpy_financial``.
    A name numpy still has, even deprecated, is kept. Returns the names added (list of str)."""
    if np is None:
        import numpy as np

    names = {
        'PZERO': 0.0, 'NZERO': -0.0, 'PINF': math.inf, 'NINF': -math.inf, 'Inf': math.inf,
        'NAN': math.nan, 'NaN': math.nan, 'float_': np.float64, 'complex_': np.complex128,
        'alltrue': np.all, 'sometrue': np.any, 'product': np.prod, 'round_': np.round,
        'trapz': getattr(np, 'trapezoid', None),
        # as numpy < 2.4 and < 2 defined them:
        'in1d': lambda ar1, ar2, *args, **kw: np.isin(np.asarray(ar1).ravel(), ar2, *args, **kw),
        'msort': lambda a: np.sort(a, axis=0),
        **{name: _removed(name) for name in ('npv', 'pmt', 'ppmt', 'pv', 'rate', 'mirr')},
    }
    added = [] if 'bool' in np.__dict__ else ['bool']  # numpy 1.24-1.26 lack it (2.x has it)
    if added:  # MXNet uses it as a dtype: the builtin is one
        np.bool = bool
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
            raise ImportError(f'Python {sys.version_info.major}.{sys.version_info.minor} 没有 '
                              'distutils，也没有装 setuptools，而 MXNet 1.9.1 要导入 distutils。'
                              '请安装 setuptools：`pip install setuptools`。') from err
