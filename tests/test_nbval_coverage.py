"""Where nbval compares the stored outputs and the coverage goals (scripts/nbval_coverage.py),
and the project's cell tags in a real nbval run (tests/nbval_tags.py). The GPU check's tests are
in tests/test_gpu_check.py."""
import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / 'scripts'))
import nbval_coverage  # noqa: E402


def test_every_notebook_is_in_the_table_with_its_edition_totals(capsys):
    nbval_coverage.report()
    table = capsys.readouterr().out
    rows = [ln for ln in table.splitlines() if ln.startswith('notebooks/')]
    assert len(rows) == 15 and 'mxnet 版' in table and 'pytorch 版' in table
    cells = [ln.split()[1:7] for ln in rows]  # with output = CPU + test-gpu + figure + nowhere
    assert all(int(c[0]) == sum(map(int, c[1:5])) for c in cells), table


# PYTORCH_CI_SHARE waits on stores on several GPUs: the device-independent verdicts of PyTorch
# 04, 05, 06 and 08 can move into cells of their own only when those notebooks are stored again on
# two and four GPUs, which this workplace did not lend on 2026-12-02 (docs/gpu-runs.md, pending
# edits). strict: the day the goal is met this test fails until the mark goes.
WAITING = {'PYTORCH_CI_SHARE': 'needs PyTorch 04, 05, 06 and 08 stored again on several GPUs'}
# The PyTorch cells compared on CI's CPU, 2026-12-02: may only rise, until the goal is met.
PYTORCH_CI_CELLS = 50


@pytest.mark.parametrize('goal', [
    pytest.param(g, marks=pytest.mark.xfail(strict=True, reason=WAITING[g])) if g in WAITING
    else g for g in nbval_coverage.GOALS])
def test_the_coverage_goal_is_met(goal):
    """Each goal of scripts/nbval_coverage.py; a miss names the goal, the figure and the cells."""
    problems, _ = nbval_coverage.goal_problems()
    assert not problems[goal], '\n'.join(problems[goal])


def test_the_pytorch_cells_compared_in_ci_never_fall():
    _, tables = nbval_coverage.goal_problems()
    compared = sum(len(row['cpu']) for row in tables['pytorch'].values())
    assert compared >= PYTORCH_CI_CELLS, f'CI compares {compared} PyTorch cells, ' \
        f'{PYTORCH_CI_CELLS} before: a cell moved out of CI'


def test_check_fails_exactly_when_a_goal_is_missed():
    problems, _ = nbval_coverage.goal_problems()
    out = subprocess.run([sys.executable, 'scripts/nbval_coverage.py', '--check'], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    missed = [p for goal in nbval_coverage.GOALS for p in problems[goal]]
    assert out.returncode == (1 if missed else 0), out.stdout + out.stderr
    assert out.stdout.count('没有达到目标：') == len(missed), out.stdout


def _code_cell(outputs, tags=(), count=3):
    return nbformat.v4.new_code_cell('f()', execution_count=count, outputs=outputs,
                                     metadata={'tags': list(tags)})


def _figure(text='<Figure size 650x350 with 1 Axes>'):
    return nbformat.v4.new_output('display_data', data={'image/png': 'iVBORw0K',
                                                        'text/plain': text})


def test_a_cell_that_compares_only_a_figure_repr_counts_as_a_figure(tmp_path, monkeypatch):
    stdout = nbformat.v4.new_output('stream', name='stdout', text='加速比 1.2×\n')
    nb = nbformat.v4.new_notebook(cells=[
        _code_cell([_figure()], count=2),                                  # figure
        _code_cell([_figure('<Figure size 1000x520 with 2 Axes>'), _figure()], count=3),
        _code_cell([stdout, _figure()], count=4),                          # text and a figure
        _code_cell([_figure()], ['stored-machine'], count=5),              # figure anywhere
        _code_cell([stdout], ['stored-machine'], count=6),                 # GPU check only
        _code_cell([stdout], ['stored-data'], count=None),                 # GPU check only
        nbformat.v4.new_code_cell('g()')])                                 # no output
    nb.metadata['d2lzh'] = {'stored_gpus': 1}
    nbformat.write(nb, tmp_path / 'nb.ipynb')
    monkeypatch.setattr(nbval_coverage, 'ROOT', tmp_path)
    row = nbval_coverage.classify('nb.ipynb')
    assert row['cells'] == 6 and row['figure'] == ['[2]', '[3]', '[5]']
    assert row['cpu'] == ['[4]'] and row['gpu'] == ['[6]', '(第 6 个代码单元格)']


def test_an_ignored_measurement_misses_its_goals(tmp_path, monkeypatch):
    stdout = nbformat.v4.new_output('stream', name='stdout', text='每个迭代周期 12.3 秒\n')
    nb = nbformat.v4.new_notebook(cells=[
        _code_cell([stdout], ['nbval-ignore-output'], count=7), _code_cell([stdout], count=8)])
    nbformat.write(nb, tmp_path / 'nb.ipynb')
    monkeypatch.setattr(nbval_coverage, 'ROOT', tmp_path)
    monkeypatch.setattr(nbval_coverage.project, 'notebooks', lambda edition: ['nb.ipynb'])
    problems, _ = nbval_coverage.goal_problems(('pytorch',))
    assert problems['NOWHERE_LIMIT'][0].startswith('NOWHERE_LIMIT：pytorch 版 1/2 个')
    assert '单元格 [7] 被忽略，却没有' in problems['NOWHERE_LIMIT'][1]
    assert problems['MEASURED_NEVER_IGNORED'] == [
        'MEASURED_NEVER_IGNORED：nb.ipynb 的单元格 [7] 打印了测量值，却整个被忽略：改标 measured'
        '（数字被掩码，文字仍然比较）']
    assert problems['PYTORCH_CI_SHARE'] == []  # 1 of 2 compared in CI: 50 %


def _rows(cpu, gpu=(), figure=(), nowhere=()):
    return {'notebooks/x.ipynb': {'cells': len(cpu) + len(gpu) + len(figure) + len(nowhere),
                                  'cpu': list(cpu), 'gpu': list(gpu), 'figure': list(figure),
                                  'nowhere': list(nowhere), 'measured': 0}}


def test_the_ci_goals_count_figures_as_the_issue_says():
    # MXNet: every text cell in CI, figures aside; PyTorch: half of all output cells, figures in.
    assert nbval_coverage.ci_goal('mxnet', _rows(['[1]', '[2]'], figure=['[3]'])) is None
    miss = nbval_coverage.ci_goal('mxnet', _rows(['[1]'], gpu=['[2]'], figure=['[3]']))
    assert miss.startswith('MXNET_CI_SHARE：') and '1/2' in miss and 'notebooks/x.ipynb [2]' in miss
    assert nbval_coverage.ci_goal('pytorch', _rows(['[1]', '[2]'], ['[3]'], ['[4]'])) is None
    miss = nbval_coverage.ci_goal('pytorch', _rows(['[1]'], ['[3]'], ['[4]', '[5]']))
    assert miss.startswith('PYTORCH_CI_SHARE：') and '1/4' in miss and '还差 1 个' in miss


def _nbval(tmp_path, stored_gpus, tags, printed='acc 0.5 快\n', max_examples=None):
    """nbval on a one-cell notebook that stored `printed` and prints 'acc 0.7 快'."""
    out = [nbformat.v4.new_output('stream', name='stdout', text=printed)]
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(
        'print("acc 0.7 快")', execution_count=1, outputs=out, metadata={'tags': tags})])
    nb.metadata['kernelspec'] = {'name': 'python3', 'display_name': 'Python 3',
                                 'language': 'python'}
    nb.metadata['d2lzh'] = {'stored_gpus': stored_gpus}
    folder = ROOT / 'build' / 'test-tags'  # under the repository: its conftest.py loads the tags
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f'{tmp_path.name}.ipynb'
    nbformat.write(nb, path)
    try:
        return subprocess.run(
            [sys.executable, '-m', 'pytest', '--nbval', '--nbval-current-env', '-q',
             '-p', 'no:cacheprovider', str(path)], capture_output=True, text=True, timeout=300,
            cwd=ROOT, env={**{k: v for k, v in os.environ.items() if k != 'D2LZH_MAX_EXAMPLES'},
                           'CUDA_VISIBLE_DEVICES': '',
                           **({'D2LZH_MAX_EXAMPLES': max_examples} if max_examples else {})}
        ).returncode
    finally:
        path.unlink()
        if not any(folder.iterdir()):
            folder.rmdir()


@pytest.mark.parametrize('stored_gpus, tags, printed, code', [
    (0, [], 'acc 0.5 快\n', 1),                         # a number differs: compared, fails
    (0, ['measured'], 'acc 0.5 快\n', 0),               # the number masked
    (0, ['measured'], 'acc 0.5 慢\n', 1),               # the verdict still compared
    (1, ['measured', 'stored-machine'], 'acc 0.5 慢\n', 0),  # stored on a GPU, run on none
    (0, ['measured', 'stored-machine'], 'acc 0.5 慢\n', 1),  # stored and run on a CPU
])
def test_the_tags_in_an_nbval_run(tmp_path, stored_gpus, tags, printed, code):
    assert _nbval(tmp_path, stored_gpus, tags, printed) == code


@pytest.mark.parametrize('max_examples, code', [('128', 0), (None, 1)])
def test_stored_data_is_compared_only_on_the_stored_data(tmp_path, max_examples, code):
    # make test trains on 128 images: not compared; the data of the stored run: compared.
    tags = ['measured', 'stored-data']
    assert _nbval(tmp_path, 0, tags, 'acc 0.5 慢\n', max_examples) == code


@pytest.mark.parametrize('source, hidden', [
    ('d2l.record("k", 1);', True), ('d2l.record("k", 1);  # 注释', True),
    ('f(\n  1);\n\n# 末尾的注释\n', True), ('f(1)  # ;', False), ("a = 'x;'\na", False)])
def test_a_cell_is_quiet_as_ipython_decides(source, hidden):
    """IPython hides a cell's value when its last token, comments aside, is ';'."""
    sys.path.insert(0, str(ROOT / 'tests'))
    from nbval_tags import quiet
    assert quiet(source) is hidden
