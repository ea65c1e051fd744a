"""Make MXNet 1.9.1 importable on today's Python and numpy, numpy 2 included (beyond the book).

MXNet 1.9.1 (the last release, 2022) has two problems on current stacks:

* at import time it reads names from the numpy module that numpy has since removed:
  the alias ``np.bool`` (removed in numpy 1.24: ``AttributeError: module 'numpy' has no
  attribute 'bool'``) and, under numpy 2, constants and aliases such as ``PZERO``,
  ``NINF``, ``NAN``, ``alltrue``, ``sometrue``, ``product``, ``round_``, ``in1d``,
  ``trapz``, ``msort`` and the financial functions ``npv``, ``pmt``, ... (numpy 1.20);
* it imports ``distutils``, which Python 3.12 removed (``ModuleNotFoundError: No module
  named 'distutils'``); setuptools ships a replacement.

:func:`prepare_mxnet_import` fixes both in the running process: it puts each missing name
back on the numpy module (an alias of today's equivalent: ``np.PZERO = 0.0``,
``np.alltrue = np.all``, ``np.trapz = np.trapezoid`` ...; the financial functions, which
numpy dropped without replacement, become stubs that raise :class:`NotImplementedError`
naming ``numpy_financial`` when called), and makes ``distutils`` importable. Only names
that numpy lacks are added, nothing numpy has is replaced, so with the pinned numpy 1.x
the only change is ``np.bool`` on numpy 1.24-1.26, as before. d2lzh runs it just before
MXNet is first imported (:func:`prepare_on_import`), so ``import d2lzh`` followed by
``import mxnet`` works on Python 3.10-3.13
with numpy 1.23-1.26 and 2.x. The list of names comes from MXNet's own sources
(``mxnet/numpy/utils.py``, ``mxnet/numpy/fallback.py``, ``mxnet/numpy_dispatch_protocol.py``);
with numpy 2, MXNet 1.9.1 was checked to train a hybridized Gluon CNN, ``export`` and
``SymbolBlock.imports`` a model and ``split_and_load`` over two CPU contexts.

pip refuses to install ``mxnet`` next to numpy 2 because the wheel declares
``numpy<2``; :mod:`d2lzh.install` installs it with ``--no-deps`` there.
"""
import importlib
import math
import sys
import warnings

_prepared = False


def _removed_function(name, fix):
    def removed(*args, **kwargs):
        raise NotImplementedError(f'numpy.{name} was removed from numpy; {fix}')
    removed.__name__ = name
    removed.__qualname__ = name
    removed.__doc__ = (f'Placeholder restored by d2lzh so that MXNet 1.9.1 imports: '
                       f'numpy.{name} was removed from numpy. Raises NotImplementedError.')
    return removed


def _in1d(ar1, ar2, assume_unique=False, invert=False, **kwargs):
    """numpy.in1d as numpy < 2.4 defined it: ``isin`` on the flattened first argument."""
    import numpy as np
    return np.isin(np.asarray(ar1).ravel(), ar2, assume_unique=assume_unique,
                   invert=invert, **kwargs)


def _msort(a):
    """numpy.msort as numpy < 2 defined it: a copy sorted along the first axis."""
    import numpy as np
    return np.sort(a, axis=0)


def _restorations(np):
    """name -> value for every numpy name MXNet 1.9.1 reads (see the module docstring)."""
    financial_fix = ('MXNet only re-exports it. Use the numpy_financial package '
                     '(pip install numpy-financial), e.g. numpy_financial.{}(...).')
    names = {
        'PZERO': 0.0, 'NZERO': -0.0, 'PINF': math.inf, 'NINF': -math.inf,
        'Inf': math.inf, 'NAN': math.nan, 'NaN': math.nan,
        'float_': np.float64, 'complex_': np.complex128,
        'alltrue': np.all, 'sometrue': np.any, 'product': np.prod, 'round_': np.round,
        'in1d': _in1d, 'msort': _msort,
        'trapz': getattr(np, 'trapezoid', None),
    }
    for name in ('npv', 'pmt', 'ppmt', 'pv', 'rate', 'mirr'):
        names[name] = _removed_function(name, financial_fix.format(name))
    return {k: v for k, v in names.items() if v is not None}


def restore_numpy_names(np=None):
    """Put back on the numpy module the names MXNet 1.9.1 reads and numpy removed.

    Args:
        np: the numpy module (default: ``import numpy``).

    Returns:
        list of str: the names added (empty when numpy has all of them, e.g. numpy 1.23).
        A name numpy still provides, even through a deprecation path, is never replaced.
    """
    if np is None:
        import numpy as np
    added = []
    if 'bool' not in np.__dict__:
        # numpy 1.24-1.26 have no np.bool (numpy 2 has it again, as np.bool_);
        # MXNet uses it only as a dtype name, which the builtin is.
        np.bool = bool
        added.append('bool')
    for name, value in _restorations(np).items():
        if name in np.__dict__:
            continue
        with warnings.catch_warnings():
            warnings.simplefilter('ignore')
            try:
                getattr(np, name)  # numpy 1.x still answers some through __getattr__
                continue
            except AttributeError:
                pass
        setattr(np, name, value)
        added.append(name)
    return added


def prepare_mxnet_import():
    """Restore what MXNet 1.9.1 expects from numpy and the standard library.

    Safe to call many times. Returns None.

    Raises:
        ImportError: numpy is not installed (``pip install numpy``), or Python 3.12+ has
            no setuptools to provide ``distutils`` (``pip install setuptools``).
    """
    global _prepared
    if _prepared:
        return
    from ._cuda11 import preload
    preload()  # a GPU build of MXNet: load the driver and the CUDA 11 libraries first
    import numpy as np

    restore_numpy_names(np)
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


class _PrepareOnImport:
    """A :data:`sys.meta_path` finder that runs :func:`prepare_mxnet_import` at the first
    ``import mxnet`` (d2lzh's own, or the book's ``from mxnet import nd``); it finds
    nothing itself, the normal finders then import MXNet."""

    busy = False   # True while prepare_mxnet_import() runs (it looks mxnet up itself)

    @classmethod
    def find_spec(cls, fullname, path=None, target=None):
        if fullname == 'mxnet' and not cls.busy and not _prepared:
            cls.busy = True
            try:
                prepare_mxnet_import()   # an ImportError here is what `import mxnet` raises
            finally:
                cls.busy = False
        return None


def prepare_on_import():
    """Have :func:`prepare_mxnet_import` run just before MXNet is first imported, not now.

    ``import d2lzh`` calls this, so that ``import d2lzh`` followed by a plain ``import
    mxnet`` works, while the PyTorch edition (``from d2lzh import torch``), which never
    imports MXNet, does not pay for it: making ``distutils`` importable imports setuptools,
    0.1-0.3 s of every cold start (measured on the H100 machine, notebook
    在现代 GPU 上把训练跑满). Safe to call many times. Returns None.
    """
    if _prepared or any(isinstance(f, _PrepareOnImport) for f in sys.meta_path):
        return
    if 'mxnet' in sys.modules:  # imported before d2lzh: too late to help, nothing to do
        return
    sys.meta_path.insert(0, _PrepareOnImport())


def import_mxnet():
    """Import and return the ``mxnet`` module after :func:`prepare_mxnet_import`."""
    prepare_mxnet_import()
    import mxnet
    return mxnet
