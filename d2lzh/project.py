"""The project's own facts, written once: its notebooks and its repository (beyond the book).

:data:`NOTEBOOKS` is the one registry of the chapter notebooks. The Makefile, the scripts,
the installer and the tests read it; a new notebook is added here and nowhere else. The
repository URL is written once too, in pyproject.toml's ``[project.urls] Source``; it
reaches an installed d2lzh through the package metadata.

Run as a script (no package import, so it works before any install), it prints paths for
the Makefile: ``python d2lzh/project.py notebooks mxnet|pytorch|all``.
"""
import importlib.metadata
import re
import sys
from collections import namedtuple
from pathlib import Path

Notebook = namedtuple('Notebook', 'edition path section twin')
Notebook.__doc__ = """One chapter notebook: ``edition`` ('mxnet' or 'pytorch'), ``path``
relative to the repository root, the book ``section`` it follows ('4.6', '8.1' ... or
'beyond' for a notebook of its own), and ``twin``: the path of the other edition's
notebook of the same section, or None."""

_MX, _PT = 'notebooks/', 'notebooks/pytorch/'
NOTEBOOKS = (
    Notebook('mxnet', _MX + '01_use-gpu.ipynb', '4.6', _PT + '01_use-gpu.ipynb'),
    Notebook('mxnet', _MX + '02_hybridize.ipynb', '8.1', _PT + '02_hybridize.ipynb'),
    Notebook('mxnet', _MX + '03_async-computation.ipynb', '8.2', _PT + '03_async-computation.ipynb'),
    Notebook('mxnet', _MX + '04_auto-parallelism.ipynb', '8.3', _PT + '04_auto-parallelism.ipynb'),
    Notebook('mxnet', _MX + '05_multiple-gpus.ipynb', '8.4', _PT + '05_multiple-gpus.ipynb'),
    Notebook('mxnet', _MX + '06_multiple-gpus-gluon.ipynb', '8.5',
             _PT + '06_multiple-gpus-concise.ipynb'),
    Notebook('mxnet', _MX + '07_distributed-training.ipynb', 'beyond',
             _PT + '08_distributed-training.ipynb'),
    Notebook('pytorch', _PT + '01_use-gpu.ipynb', '4.6', _MX + '01_use-gpu.ipynb'),
    Notebook('pytorch', _PT + '02_hybridize.ipynb', '8.1', _MX + '02_hybridize.ipynb'),
    Notebook('pytorch', _PT + '03_async-computation.ipynb', '8.2', _MX + '03_async-computation.ipynb'),
    Notebook('pytorch', _PT + '04_auto-parallelism.ipynb', '8.3', _MX + '04_auto-parallelism.ipynb'),
    Notebook('pytorch', _PT + '05_multiple-gpus.ipynb', '8.4', _MX + '05_multiple-gpus.ipynb'),
    Notebook('pytorch', _PT + '06_multiple-gpus-concise.ipynb', '8.5',
             _MX + '06_multiple-gpus-gluon.ipynb'),
    Notebook('pytorch', _PT + '07_modern-gpu-training.ipynb', 'beyond', None),
    Notebook('pytorch', _PT + '08_distributed-training.ipynb', 'beyond',
             _MX + '07_distributed-training.ipynb'),
)
EDITIONS = ('mxnet', 'pytorch')


def notebooks(edition='all'):
    """Paths (str, relative to the repository root) of ``edition``'s notebooks, in order.

    Raises:
        ValueError: ``edition`` is not 'mxnet', 'pytorch' or 'all'.
    """
    if edition not in (*EDITIONS, 'all'):
        raise ValueError(f'edition={edition!r} is not valid: use mxnet, pytorch or all')
    return [nb.path for nb in NOTEBOOKS if edition in ('all', nb.edition)]


def find(path):
    """The :class:`Notebook` whose path or file name ends like ``path``, or None."""
    path = str(path).replace('\\', '/')
    for nb in NOTEBOOKS:
        if path == nb.path or path.endswith('/' + nb.path) or (
                '/' not in path and nb.edition == 'mxnet' and nb.path.endswith('/' + path)):
            return nb
    return None


def repository():
    """(owner, repo, branch) from the ``Source`` URL (pyproject.toml), or None.

    Read from pyproject.toml in a checkout, else from the installed package's metadata.
    """
    pyproject = Path(__file__).resolve().parent.parent / 'pyproject.toml'
    if pyproject.exists():  # a checkout: its own file wins over an older install's metadata
        text = pyproject.read_text(encoding='utf-8')
    else:
        try:
            text = ' '.join(importlib.metadata.metadata('d2lzh').get_all('Project-URL') or [])
        except importlib.metadata.PackageNotFoundError:
            text = ''
    m = re.search(r'https://github\.com/([\w.-]+)/([\w.-]+)/tree/([\w./-]+?)["\s,]', text + ' ')
    return m.groups() if m else None


def url(path, kind='raw'):
    """The URL of ``path`` (repository-relative, with ``/``) in the repository, or None.

    ``kind``: 'raw' (the file's bytes), 'blob' (its GitHub page), 'tree' (a folder's page)
    or 'colab' (a notebook opened in Google Colab).
    """
    repo = repository()
    if repo is None:
        return None
    owner, name, branch = repo
    return {'raw': f'https://raw.githubusercontent.com/{owner}/{name}/{branch}/{path}',
            'blob': f'https://github.com/{owner}/{name}/blob/{branch}/{path}',
            'tree': f'https://github.com/{owner}/{name}/tree/{branch}/{path}',
            'colab': f'https://colab.research.google.com/github/{owner}/{name}/blob/'
                     f'{branch}/{path}'}[kind]


if __name__ == '__main__':
    if len(sys.argv) != 3 or sys.argv[1] != 'notebooks':
        sys.exit('usage: python d2lzh/project.py notebooks mxnet|pytorch|all')
    print(' '.join(notebooks(sys.argv[2])))
