"""What makes a runtime able to import a framework: the one import hook (beyond the book).

``import d2lzh`` puts one finder first on :data:`sys.meta_path`. At the first ``import mxnet``
it runs, in order: (1) after :func:`enable`, for an import by notebook code or d2lzh, install
the MXNet build that fits the machine (:mod:`~d2lzh.setup.install`); (2) load a GPU build's
CUDA 11 libraries (:mod:`~d2lzh.setup.cuda11`); (3) restore the numpy names and ``distutils``
MXNet 1.9.1 needs (:mod:`~d2lzh.setup.numpy2`). At ``import torch`` only (1) runs, so the
PyTorch edition never pays for (2)-(3). A failing step raises its ImportError (cause and fix)
from that ``import`` and runs again at the next. The book never imports the installer."""
import importlib
import os
import sys
from pathlib import Path


class _ImportHook:
    """The one :data:`sys.meta_path` finder of d2lzh (see the module docstring)."""

    def __init__(self):
        self.install, self.prepared = False, False   # enable() called; steps 2-3 done for mxnet
        self.installed, self._running = set(), set()   # step 1 done for; steps running now for

    def find_spec(self, fullname, path=None, target=None):
        if fullname not in ('mxnet', 'torch') or fullname in self._running:
            return None
        self._running.add(fullname)
        try:
            if (self.install and fullname not in self.installed
                    and _imported_by_notebook_or_d2lzh()):
                from . import install
                try:
                    (install.ensure_mxnet if fullname == 'mxnet' else install.ensure_torch)()
                except install.SetupError as err:   # pip's frames help no reader
                    raise install.SetupError(str(err)) from None
                self.installed.add(fullname)
            if fullname == 'mxnet' and not self.prepared:
                from . import cuda11, numpy2
                if cuda11.preload():     # False: no MXNet installed, nothing to prepare
                    numpy2.prepare()
                    self.prepared = True
        finally:
            self._running.discard(fullname)
        return None


_hook = _ImportHook()


def _imported_by_notebook_or_d2lzh():
    """Whether this import is notebook code's (``__main__``) or d2lzh's, not a library's probe."""
    frame = sys._getframe(1)
    while frame is not None and (
            frame.f_code.co_filename.startswith('<frozen')
            or frame.f_globals.get('__name__', '').startswith(('importlib', __name__))):
        frame = frame.f_back
    name = frame.f_globals.get('__name__', '') if frame is not None else ''
    return name == '__main__' or name == 'd2lzh' or name.startswith('d2lzh.')


def add_import_hook():
    """Put the import hook first on :data:`sys.meta_path` (``import d2lzh`` does). Imports
    neither MXNet nor setuptools. Safe to call many times."""
    if _hook not in sys.meta_path:
        sys.meta_path.insert(0, _hook)


def enable():
    """Install the framework at its first import when it is missing or the wrong build (the
    setup cell of every notebook calls it). Off in a source checkout (``make run/test/lab``: the
    pinned ``.venv``) unless ``$D2LZH_AUTO_INSTALL=1``, and anywhere with ``=0``. Returns None."""
    flag = os.environ.get('D2LZH_AUTO_INSTALL', '').strip()
    checkout = (Path(__file__).resolve().parents[2] / 'pyproject.toml').exists()
    if flag == '1' or (flag != '0' and not checkout):
        add_import_hook()
        _hook.install = True


def enabled():
    """Whether installation at import (:func:`enable`) is on in this process."""
    return _hook.install and _hook in sys.meta_path


def disable():
    """Switch installation at import off; MXNet's import is still prepared. Returns None."""
    _hook.install = False


def lazy_names(module, names):
    """PEP 562 ``(__getattr__, __dir__)`` for the module named ``module``: each of ``names``
    (name -> the module that defines it) is imported at its first use, so that importing a book
    namespace imports no framework. Other names raise AttributeError."""
    def __getattr__(name):
        if name not in names:
            raise AttributeError(f'模块 {module!r} 没有属性 {name!r}')
        return getattr(importlib.import_module(names[name]), name)

    def __dir__():
        return sorted(set(vars(sys.modules[module])) | set(names))
    return __getattr__, __dir__


def import_mxnet():
    """Import and return ``mxnet`` through the import hook (its ImportErrors propagate)."""
    add_import_hook()
    return importlib.import_module('mxnet')


def installed_mxnet():
    """The installed MXNet distribution as (name, version), e.g. ``('mxnet-cu112', '1.9.1')``,
    or None when there is none. Read from the package metadata without importing MXNet."""
    from importlib import metadata
    return next(((d.metadata['Name'].lower(), d.version) for d in metadata.distributions()
                 if (d.metadata['Name'] or '').lower().split('-')[0] == 'mxnet'), None)
