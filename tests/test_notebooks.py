"""The stored notebooks: code shared with the package, hygiene, and the runner.

nbval (``pytest --nbval notebooks``) re-executes the notebooks and compares
outputs; these tests check what nbval does not.
"""
import ast
import inspect
import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import nbformat
import pytest

import d2lzh

ROOT = Path(__file__).resolve().parent.parent
MXNET_NOTEBOOKS = sorted((ROOT / 'notebooks').glob('*.ipynb'))
TORCH_NOTEBOOKS = sorted((ROOT / 'notebooks' / 'pytorch').glob('*.ipynb'))
NOTEBOOKS = MXNET_NOTEBOOKS + TORCH_NOTEBOOKS
IDS = [f'{p.parent.name}/{p.stem}' for p in NOTEBOOKS]
EXPECTED = ['01_use-gpu', '02_hybridize', '03_async-computation', '04_auto-parallelism',
            '05_multiple-gpus', '06_multiple-gpus-gluon']
EXPECTED_TORCH = ['01_use-gpu', '02_hybridize', '03_async-computation',
                  '04_auto-parallelism', '05_multiple-gpus', '06_multiple-gpus-concise',
                  '07_modern-gpu-training']
MACHINE_PATH = re.compile(r'(/work/|/root/|/home/[a-z]|/tmp/[A-Za-z0-9_.-]+/|/Users/)')


def _code_cells(nb):
    return [c for c in nb.cells if c.cell_type == 'code']


def _saved_definitions(nb):
    """(name, ast node) of every top-level def/class marked ``#@save``."""
    for cell in _code_cells(nb):
        source = '\n'.join(ln for ln in cell.source.splitlines()
                           if not ln.lstrip().startswith(('%', '!')))
        tree = ast.parse(source)
        lines = source.splitlines()
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and \
                    '#@save' in lines[node.lineno - 1].replace(' ', ''):
                yield node.name, node


def _load(path):
    return nbformat.read(path, as_version=4)


def test_all_notebooks_exist():
    assert [p.stem for p in MXNET_NOTEBOOKS] == EXPECTED
    assert [p.stem for p in TORCH_NOTEBOOKS] == EXPECTED_TORCH


def _package_for(path):
    """The module whose code a notebook's #@save definitions must equal."""
    if path.parent.name == 'pytorch':
        pytest.importorskip('torch')
        from d2lzh import torch as d2l_torch
        return d2l_torch
    return d2lzh


@pytest.mark.parametrize('edition', ['mxnet', 'pytorch'])
def test_saved_functions_are_the_package_code(edition):
    """A function a notebook defines with #@save must be the package's own code."""
    found = set()
    for path in MXNET_NOTEBOOKS if edition == 'mxnet' else TORCH_NOTEBOOKS:
        package = _package_for(path)
        for name, node in _saved_definitions(_load(path)):
            obj = getattr(package, name)
            package_node = ast.parse(textwrap.dedent(inspect.getsource(obj))).body[0]
            assert ast.dump(node) == ast.dump(package_node), \
                f'{path.name}: {name} differs from {inspect.getsourcefile(obj)}'
            found.add(name)
    expected = {'split_and_load', 'allreduce', 'get_params'}
    if edition == 'mxnet':
        expected |= {'Benchmark', 'resnet18'}
    assert expected <= found


@pytest.mark.parametrize('path', NOTEBOOKS, ids=IDS)
def test_notebook_structure(path):
    nb = _load(path)
    first = nb.cells[0]
    assert first.cell_type == 'markdown' and first.source.startswith('# '), \
        'the first cell is the section title'
    assert any(c.cell_type == 'markdown' and '## 练习' in c.source for c in nb.cells), \
        'every notebook ends with the exercises (## 练习)'
    # the generated setup cell (scripts/make_setup_cell.py, tests/test_packaging.py) aside
    sources = [c.source for c in _code_cells(nb) if '# d2lzh setup cell' not in c.source]
    d2l_at = next(i for i, s in enumerate(sources)
                  if 'import d2lzh' in s or 'from d2lzh import' in s)
    mx_at = [i for i, s in enumerate(sources) if re.search(r'^\s*(import|from) mxnet', s, re.M)]
    assert not mx_at or d2l_at <= min(mx_at), 'import d2lzh must come before import mxnet'
    cell = sources[d2l_at]
    if mx_at and d2l_at == min(mx_at):
        assert re.search(r'import d2lzh|from d2lzh import', cell).start() < \
            re.search(r'(import|from) mxnet', cell).start()
    assert 'setup_report()' in cell, 'the setup cell reports versions and devices'


@pytest.mark.parametrize('path', NOTEBOOKS, ids=IDS)
def test_stored_outputs_are_complete_and_clean(path):
    nb = _load(path)
    cells = _code_cells(nb)
    counts = [c.execution_count for c in cells]
    assert None not in counts and counts == sorted(counts), \
        'store outputs of one complete top-to-bottom run'
    has_png = False
    for c in cells:
        tags = c.metadata.get('tags', [])
        for out in c.outputs:
            text = json.dumps(out, ensure_ascii=False)
            assert not MACHINE_PATH.search(text), f'machine path in output: {c.source[:60]!r}'
            if out.output_type == 'error':
                assert 'raises-exception' in tags, f'stored error in {c.source[:60]!r}'
            if out.output_type == 'stream' and out.name == 'stderr':
                assert 'Warning' not in out.text, f'warning stored: {out.text[:200]}'
            has_png |= 'image/png' in out.get('data', {})
    if any('d2l.record(' in c.source for c in cells):
        assert has_png, 'a notebook that measures timings ends with a chart of them'


def _write_nb(path, sources):
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(s) for s in sources])
    nb.metadata['kernelspec'] = {'name': 'python3', 'display_name': 'Python 3',
                                 'language': 'python'}
    nbformat.write(nb, path)


def test_runner_reports_figures_and_names_the_failing_cell(tmp_path):
    good, bad = tmp_path / 'good.ipynb', tmp_path / 'bad.ipynb'
    _write_nb(good, ['import d2lzh as d2l', "d2l.record('speedup', 2.5, 'x')"])
    _write_nb(bad, ['x = 1', "raise ValueError('boom')", 'print("never")'])
    before = bad.read_bytes()
    (tmp_path / 'nbs').mkdir()
    good, bad = good.rename(tmp_path / 'nbs' / good.name), bad.rename(tmp_path / 'nbs' / bad.name)
    out = subprocess.run(  # relative paths, as `make run` passes them
        [sys.executable, str(ROOT / 'scripts' / 'run_notebooks.py'), '--build', 'build',
         'nbs/good.ipynb', 'nbs/bad.ipynb'],
        capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert out.returncode == 1, out.stdout + out.stderr
    assert re.search(r'\| good \| ok \| \d+ s \| speedup = 2\.5x \|', out.stdout), out.stdout
    assert re.search(r'\| bad \| FAILED \|', out.stdout)
    assert "bad.ipynb failed in cell 1 (\"raise ValueError('boom')\"): ValueError: boom" \
        in out.stderr
    assert (tmp_path / 'build' / 'html' / 'good.html').exists()
    assert (tmp_path / 'build' / 'notebooks' / 'bad.ipynb').exists()
    assert bad.read_bytes() == before, 'the source notebook is never modified'
