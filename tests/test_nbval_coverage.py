"""Where nbval compares the stored outputs (scripts/nbval_coverage.py), the project's cell tags
in a real nbval run (tests/nbval_tags.py), and the GPU check's skips (scripts/gpu_check.py)."""
import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / 'scripts'))
import nbval_coverage  # noqa: E402


def test_every_notebook_is_in_the_table_and_every_ignored_cell_says_why(capsys):
    problems = nbval_coverage.report()
    table = capsys.readouterr().out
    rows = [ln for ln in table.splitlines() if ln.startswith('notebooks/')]
    assert len(rows) == 15 and 'mxnet edition' in table and 'pytorch edition' in table
    assert not [p for p in problems if 'without a reason' in p], problems


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


def test_the_gpu_check_skips_what_this_machine_cannot_run():
    out = subprocess.run([sys.executable, 'scripts/gpu_check.py'], capture_output=True, text=True,
                         cwd=ROOT, timeout=120, env={**os.environ,
                                                     'CUDA_VISIBLE_DEVICES': ''})
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.count('跳过') == 8 and '这台机器有 0 块 GPU' in out.stdout, out.stdout
    assert 'notebooks/pytorch/06_multiple-gpus-concise.ipynb: 跳过（存储它的机器有' in out.stdout


@pytest.mark.parametrize('source, hidden', [
    ('d2l.record("k", 1);', True), ('d2l.record("k", 1);  # 注释', True),
    ('f(\n  1);\n\n# 末尾的注释\n', True), ('f(1)  # ;', False), ("a = 'x;'\na", False)])
def test_a_cell_is_quiet_as_ipython_decides(source, hidden):
    """IPython hides a cell's value when its last token, comments aside, is ';'."""
    sys.path.insert(0, str(ROOT / 'tests'))
    from nbval_tags import quiet
    assert quiet(source) is hidden
