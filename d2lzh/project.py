"""The project's own facts, written once (beyond the book): :data:`EDITIONS`,
:data:`NOTEBOOKS` and the repository URL. Plain Python: scripts/make_args.py loads it
without importing the package."""
import importlib.metadata
import re
from collections import namedtuple
from pathlib import Path

Notebook = namedtuple('Notebook', 'edition path section twin')
Notebook.__doc__ = """A chapter notebook: ``edition`` ('mxnet' or 'pytorch'), ``path``
from the repository root, book ``section`` ('4.6' ... or 'beyond'), ``twin`` (the other
edition's path, or None)."""

# book section, MXNet notebook, PyTorch notebook (None: none)
_SECTIONS = (
    ('4.6', '01_use-gpu', '01_use-gpu'),
    ('8.1', '02_hybridize', '02_hybridize'),
    ('8.2', '03_async-computation', '03_async-computation'),
    ('8.3', '04_auto-parallelism', '04_auto-parallelism'),
    ('8.4', '05_multiple-gpus', '05_multiple-gpus'),
    ('8.5', '06_multiple-gpus-gluon', '06_multiple-gpus-concise'),
    ('beyond', '07_distributed-training', '08_distributed-training'),
    ('beyond', None, '07_modern-gpu-training'),
)
Edition = namedtuple('Edition', 'label folder')
EDITIONS = {'mxnet': Edition('MXNet', 'notebooks/'),
            'pytorch': Edition('PyTorch', 'notebooks/pytorch/')}
_MX, _PT = (e.folder for e in EDITIONS.values())
_PATHS = [(s, m and f'{_MX}{m}.ipynb', p and f'{_PT}{p}.ipynb')
          for s, m, p in _SECTIONS]
#: Every notebook, the MXNet edition first, each edition in file order.
NOTEBOOKS = tuple(sorted(
    [Notebook('mxnet', m, s, p) for s, m, p in _PATHS if m]
    + [Notebook('pytorch', p, s, m) for s, m, p in _PATHS if p]))


def notebooks(edition='all'):
    """Paths (str, relative to the repository root) of ``edition``'s notebooks, in order.
    ValueError: ``edition`` is not 'mxnet', 'pytorch' or 'all'."""
    if edition not in (*EDITIONS, 'all'):
        raise ValueError(f'edition={edition!r} 无效：请用 mxnet、pytorch 或 all')
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
    """(owner, repo, branch) from the ``Source`` URL of pyproject.toml in a checkout,
    else of the installed package's metadata, or None."""
    pyproject = Path(__file__).resolve().parents[1] / 'pyproject.toml'
    if pyproject.exists():
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
    ``kind``: 'raw' (the file), 'blob' (its GitHub page), 'tree' (a folder's page) or
    'colab' (the notebook in Google Colab)."""
    repo = repository()
    if repo is None:
        return None
    owner, name, branch = repo
    blob = f'{owner}/{name}/blob/{branch}/{path}'
    return {'raw': f'https://raw.githubusercontent.com/{owner}/{name}/{branch}/{path}',
            'blob': f'https://github.com/{blob}',
            'tree': f'https://github.com/{owner}/{name}/tree/{branch}/{path}',
            'colab': f'https://colab.research.google.com/github/{blob}'}[kind]
