"""The floors of d2lzh (docs/architecture.md), read from the code with plain `ast`: every
import, module level or inside a function, is checked."""
import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / 'd2lzh'
GROUND = sorted(p for p in PACKAGE.glob('*.py') if p.name != '__init__.py')
BOOK_ROOMS = ['torch/book.py', 'torch/data.py', 'torch/train.py', 'mxnet/book.py']
FAST_PATH = {'recipe', 'ddp', 'launch', 'measure'}


def imports(path):
    """The absolute names ``path`` imports ('torch', 'd2lzh.torch.recipe', ...)."""
    parts = path.relative_to(ROOT).with_suffix('').parts  # ('d2lzh', 'torch', 'book')
    for node in ast.walk(ast.parse(path.read_text(encoding='utf-8'))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = '.'.join(parts[:len(parts) - node.level]) if node.level else ''
            module = '.'.join(filter(None, (base, node.module)))
            yield module
            yield from (f'{module}.{alias.name}' for alias in node.names)


def _hits(path, *prefixes):
    return sorted({n for n in imports(path) for p in prefixes if n == p or n.startswith(p + '.')})


@pytest.mark.parametrize('path', GROUND, ids=[p.name for p in GROUND])
def test_the_ground_floor_imports_no_framework_and_no_edition(path):
    assert not _hits(path, 'torch', 'mxnet', 'd2lzh.torch', 'd2lzh.mxnet')


@pytest.mark.parametrize('edition, other', [('torch', 'mxnet'), ('mxnet', 'torch')])
def test_an_edition_never_imports_the_other(edition, other):
    for path in sorted((PACKAGE / edition).glob('*.py')):
        assert not _hits(path, other, f'd2lzh.{other}'), path


@pytest.mark.parametrize('room', BOOK_ROOMS)
def test_the_book_rooms_do_not_import_the_fast_path(room):
    fast = [f'd2lzh.torch.{name}' for name in FAST_PATH]
    assert not _hits(PACKAGE / room, *fast)


def test_the_checks_read_real_imports():
    """The reader above sees a relative import inside a function."""
    names = set(imports(PACKAGE / 'torch' / 'ddp.py'))
    assert 'd2lzh.torch.recipe' in names and 'torch.distributed' in names


def test_the_data_room_is_below_the_results_room():
    """The data and its subset (data.py) come first; the figures recorded on them (results.py)
    build on it, never the other way round."""
    assert not _hits(PACKAGE / 'data.py', 'd2lzh.results')
    assert _hits(PACKAGE / 'results.py', 'd2lzh.data')
