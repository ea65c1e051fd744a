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
from d2lzh import project

ROOT = Path(__file__).resolve().parent.parent
MXNET_NOTEBOOKS = [ROOT / path for path in project.notebooks('mxnet')]
TORCH_NOTEBOOKS = [ROOT / path for path in project.notebooks('pytorch')]
NOTEBOOKS = MXNET_NOTEBOOKS + TORCH_NOTEBOOKS
IDS = [f'{p.parent.name}/{p.stem}' for p in NOTEBOOKS]
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


def test_the_registry_is_the_notebooks_folder():
    """d2lzh/project.py lists exactly the notebooks on disk, each edition in its folder,
    and a twin is the other edition's notebook of the same section, both ways."""
    found = (ROOT / 'notebooks').rglob('*.ipynb')
    on_disk = sorted(p.relative_to(ROOT).as_posix() for p in found
                     if '.ipynb_checkpoints' not in p.parts)
    listed = project.notebooks('all')
    assert sorted(listed) == on_disk, (
        f'not in d2lzh/project.py: {sorted(set(on_disk) - set(listed)) or "none"}; '
        f'listed but missing: {sorted(set(listed) - set(on_disk)) or "none"}')
    assert len(set(listed)) == len(listed)
    for nb in project.NOTEBOOKS:
        folder = 'notebooks/pytorch' if nb.edition == 'pytorch' else 'notebooks'
        assert nb.path.rsplit('/', 1)[0] == folder, nb
        assert project.find(nb.path) == nb and project.find(ROOT / nb.path) == nb
        if nb.twin is not None:
            twin = project.find(nb.twin)
            assert twin.edition != nb.edition and twin.twin == nb.path, nb
            assert twin.section == nb.section, nb


def _package_for(path):
    """The module whose code a notebook's #@save definitions must equal."""
    if project.find(path).edition == 'pytorch':
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


def _write_nb(path, sources, title=None):
    cells = [nbformat.v4.new_code_cell(src) for src in sources]
    if title:
        cells.insert(0, nbformat.v4.new_markdown_cell(f'# {title}\n\nSome math: $a^2 + b^2$.'))
    nb = nbformat.v4.new_notebook(cells=cells)
    nb.metadata['kernelspec'] = {'name': 'python3', 'display_name': 'Python 3',
                                 'language': 'python'}
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, path)


PNG_1X1 = ('iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAA'
           'AABJRU5ErkJggg==')


def _runner(args, cwd):
    return subprocess.run([sys.executable, str(ROOT / 'scripts' / 'run_notebooks.py'), *args],
                          capture_output=True, text=True, timeout=300, cwd=cwd)


def test_runner_names_the_failing_cell_as_jupyter_does(tmp_path):
    bad = tmp_path / 'nbs' / 'bad.ipynb'
    _write_nb(bad, ['x = 1', '# NBVAL_IGNORE_OUTPUT\nraise ValueError(\'boom\')', 'print("never")'])
    before = bad.read_bytes()
    out = _runner(['--build', 'build', 'nbs/bad.ipynb'], tmp_path)  # relative, as make passes it
    assert out.returncode == 1, out.stdout + out.stderr
    assert re.search(r'\| bad \| FAILED \|', out.stdout)
    # [2]: the execution count Jupyter shows; the first line that is not an nbval marker
    assert 'nbs/bad.ipynb failed in cell [2] "raise ValueError(\'boom\')": ValueError: boom' \
        in out.stderr, out.stderr
    executed = nbformat.read(tmp_path / 'build' / 'run' / 'mxnet' / 'bad.ipynb', as_version=4)
    assert executed.cells[1].execution_count == 2
    assert bad.read_bytes() == before, 'the source notebook is never modified'


def test_runner_keeps_both_editions_and_never_overwrites(tmp_path):
    """Same stem in both editions: make run EDITION=all keeps both; a later run of
    one edition and make html (--stored) leave the other results alone."""
    mx_nb = tmp_path / 'notebooks' / '01_same.ipynb'
    pt_nb = tmp_path / 'notebooks' / 'pytorch' / '01_same.ipynb'
    _write_nb(mx_nb, ['import d2lzh as d2l', "d2l.record('speed', 2.5, 'x')"], title='MX title')
    _write_nb(pt_nb, ['import d2lzh as d2l\nfrom d2lzh import results',
                      "results.note_data_subset(256)",
                      "d2l.record('test_acc_2dev', 0.11)",
                      "d2l.record('epoch_time_1dev', 3.0, 's', note='mean of 2 epochs')"],
              title='PT title')
    out = _runner(['--build', 'build', 'notebooks/01_same.ipynb',
                   'notebooks/pytorch/01_same.ipynb'], tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    run = tmp_path / 'build' / 'run'
    for edition in ('mxnet', 'pytorch'):
        for suffix in ('.ipynb', '.html', '.jsonl'):
            folder = run / edition / ('results' if suffix == '.jsonl' else '')
            assert (folder / f'01_same{suffix}').is_file(), (edition, suffix)
    summary = (run / 'summary.md').read_text()
    assert summary.index('## MXNet edition') < summary.index('## PyTorch edition')
    assert re.search(r'\| 01_same \| ok \| \d+ s \| [\d-]+ [\d:]+ \| speed = 2\.5x \|', summary)
    assert '| [all: subset: 256 of 60000 images]; ' \
        'test_acc_2dev = 0.11 [accuracy after a few updates: means nothing]; ' \
        'epoch_time_1dev = 3 s [mean of 2 epochs] |' in summary, summary
    assert 'come from training on the first 256 of the 60000 training images' in summary
    # HTML: the notebook's first heading as title, MathJax next to the page, no CDN
    page = (run / 'pytorch' / '01_same.html').read_text()
    assert '<title>PT title（PyTorch）</title>' in page
    assert 'src="mathjax/MathJax.js?config=' in page and 'cdnjs' not in page
    assert (run / 'pytorch' / 'mathjax' / 'MathJax.js').is_file()
    assert (run / 'pytorch' / 'mathjax' / 'config' / 'TeX-AMS-MML_HTMLorMML-full.js').is_file()
    mx_page = (run / 'mxnet' / '01_same.html').read_bytes()

    # a later run of one edition keeps the other's results and summary rows
    out = _runner(['--build', 'build', 'notebooks/pytorch/01_same.ipynb'], tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    summary = (run / 'summary.md').read_text()
    assert 'speed = 2.5x' in summary and 'test_acc_2dev' in summary
    assert (run / 'mxnet' / '01_same.html').read_bytes() == mx_page
    # make html renders the stored notebooks elsewhere; a stored chart gets an alt text
    nb = nbformat.read(mx_nb, as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell("chart = dict(title='Speed per device')", outputs=[
        nbformat.v4.new_output('display_data', data={
            'image/png': PNG_1X1, 'text/plain': '<Figure size 640x480 with 1 Axes>'})]))
    nbformat.write(nb, mx_nb)
    out = _runner(['--stored', '--build', 'build', 'notebooks/01_same.ipynb',
                   'notebooks/pytorch/01_same.ipynb'], tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    stored_page = (tmp_path / 'build' / 'stored' / 'mxnet' / '01_same.html').read_text()
    assert '<title>MX title</title>' in stored_page
    assert re.findall(r'<img alt="([^"]*)"', stored_page) == ['图（MX title）：Speed per device']
    assert (tmp_path / 'build' / 'stored' / 'pytorch' / '01_same.html').is_file()
    assert (run / 'mxnet' / '01_same.html').read_bytes() == mx_page


@pytest.mark.parametrize('args, message', [
    (['nbs/nope.ipynb'], 'error: not a notebook: nbs/nope.ipynb; valid: notebooks/'),
    (['a/x.ipynb', 'b/x.ipynb'], 'would both write build/run/mxnet/x.*')])
def test_runner_refuses_bad_notebooks_in_one_line(tmp_path, args, message):
    for name in ('a/x.ipynb', 'b/x.ipynb'):
        _write_nb(tmp_path / name, ['1'])
    out = _runner(['--build', 'build', *args], tmp_path)
    assert out.returncode == 2
    assert out.stderr.count('\n') == 1 and message in out.stderr, out.stderr
    assert not (tmp_path / 'build').exists()


def test_summary_says_what_a_cpu_cannot_show():
    sys.path.insert(0, str(ROOT / 'scripts'))
    import run_summary
    fig = {'value': 0.98, 'unit': 'x', 'subset': None, 'gpus': 0, 'note': None}
    assert run_summary.figure_tags('gluon_time_ratio_2v1', fig) == \
        ['2 devices = the same CPU cores']
    assert run_summary.figure_tags('hybridize_speedup', fig) == []
    assert run_summary.figure_tags('ddp_speedup', dict(fig, gpus=1)) == ['only 1 GPU']
    assert run_summary.figure_tags('ddp_speedup', dict(fig, gpus=2)) == []
    for key, two in (('ps_iteration_ms_1_worker', False), ('ps_iteration_ms_2_workers', True),
                     ('copy_overlap_speedup_2workers', True), ('ps_trainer_step_ms_sync_2', True),
                     ('ps_trainer_step_ms_async_2', True), ('loop_sync_once_s', False)):
        assert (run_summary.figure_tags(key, fig) == ['2 devices = the same CPU cores']) is two
    row = {'name': 'n', 'status': 'ok', 'seconds': 1, 'finished': 't', 'cpu_cores': 2,
           'error': '', 'figures': {'gluon_time_ratio_2v1': fig}}
    text = run_summary.summary_markdown({'mxnet': [row]})
    assert 'No GPU that MXNet could use** (2 CPU cores)' in text
    assert 'says nothing about two GPUs' in text


def test_make_stops_at_bad_notebooks_or_edition_first(tmp_path):
    """Checked before the venv and the data: nothing is built, one line names the choices."""
    for args, expected in [
            (['EDITION=nope'], 'EDITION=nope is not valid: use EDITION=mxnet'),
            (['NOTEBOOKS=notebooks/nope.ipynb'],
             ('NOTEBOOKS: notebooks/nope.ipynb is not a notebook of this project; valid: '
              'notebooks/01_use-gpu.ipynb')),
            (['EDITION=mxnet', 'NOTEBOOKS=notebooks/pytorch/01_use-gpu.ipynb'],
             'is in the PyTorch edition but EDITION=mxnet: use EDITION=pytorch or EDITION=all'),
            (['EDITION=pytorch', 'NOTEBOOKS=notebooks/01_use-gpu.ipynb'],
             'is in the MXNet edition but EDITION=pytorch: use EDITION=mxnet or EDITION=all'),
            # forgot NOTEBOOKS=: a hint, not a run of every notebook
            (['notebooks/02_hybridize.ipynb'],
             'notebooks/02_hybridize.ipynb is not a make target: '
             'use make run NOTEBOOKS=notebooks/02_hybridize.ipynb')]:
        out = subprocess.run(['make', '-C', str(ROOT), 'run', 'VENV=' + str(tmp_path / 'venv'),
                              'BUILD=' + str(tmp_path / 'build'), *args],
                             capture_output=True, text=True, timeout=60)
        assert out.returncode != 0
        lines = [ln for ln in out.stdout.splitlines() + out.stderr.splitlines()
                 if ln.strip() and 'Entering directory' not in ln and 'Leaving directory' not in ln]
        assert len(lines) == 1 and expected in lines[0], lines
    assert not (tmp_path / 'venv').exists() and not (tmp_path / 'build').exists()


def test_nbval_names_the_failing_cell_as_jupyter_does(tmp_path):
    """tests/conftest.py makes nbval's report name the cell as make run does."""
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell('x = 1', execution_count=1),
        nbformat.v4.new_code_cell('# NBVAL_CHECK_OUTPUT\nprint(x + 1)', execution_count=2,
                                  outputs=[nbformat.v4.new_output('stream', name='stdout',
                                                                  text='3\n')])])
    nb.metadata['kernelspec'] = {'name': 'python3', 'display_name': 'Python 3',
                                 'language': 'python'}
    nbformat.write(nb, tmp_path / 'mismatch.ipynb')
    out = subprocess.run(
        [sys.executable, '-m', 'pytest', '--nbval', '--nbval-current-env', '-p', 'no:cacheprovider',
         'tests/test_packaging.py::test_unknown_attribute', str(tmp_path / 'mismatch.ipynb')],
        capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert out.returncode == 1, out.stdout + out.stderr
    assert 'mismatch.ipynb: cell [2] "print(x + 1)" failed (nbval\'s Cell 1)' in out.stdout, \
        out.stdout
