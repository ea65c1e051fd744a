"""The GPU check (scripts/gpu_check.py, ``make test-gpu``): what it skips, how it ends, the record
it keeps (tests/data/gpu-checks.json), and that every PyTorch notebook's stored outputs passed a
GPU check recorded there. Nothing here needs a GPU: nbval itself is replaced where a check runs."""
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / 'scripts'))
import gpu_check  # noqa: E402
from d2lzh import project  # noqa: E402
from nbval_tags import stored_gpus  # noqa: E402


def _stored(path):
    return json.loads((ROOT / path).read_text(encoding='utf-8'))


def test_every_pytorch_notebook_stored_on_gpus_passed_a_recorded_gpu_check():
    """Outputs stored again after their last passing check (another fingerprint) fail here."""
    record = json.loads(gpu_check.RECORD.read_text(encoding='utf-8'))
    notebooks = {path: _stored(path) for path in project.notebooks('pytorch')}
    on_gpus = {path: nb for path, nb in notebooks.items() if stored_gpus(nb['metadata'])}
    missing = gpu_check.unchecked(record, on_gpus)
    assert not missing, (
        '这些 PyTorch 版笔记本存储的输出在 tests/data/gpu-checks.json 里没有通过的 GPU 检查'
        '（输出在上次通过检查之后变了）：' + '、'.join(missing) + '。请在存储它们的那种 GPU 上运行 '
        + ' '.join(f'`make test-gpu NOTEBOOKS={p}`' for p in missing)
        + '（输出还没有在 GPU 上重新存储的，先按 docs/gpu-runs.md 存储），'
        '并提交 tests/data/gpu-checks.json 里新加的条目')


def test_the_record_is_a_list_of_complete_entries():
    record = json.loads(gpu_check.RECORD.read_text(encoding='utf-8'))
    keys = {'notebook', 'commit', 'date', 'gpus', 'gpu_count', 'host_gpus', 'result', 'passed',
            'outputs_sha256'}
    assert isinstance(record, list) and record
    for item in record:
        assert keys <= set(item) and project.find(item['notebook']) is not None, item
        assert len(item['gpus']) == item['gpu_count'] <= item['host_gpus'], item
        assert len(item['outputs_sha256']) == 64 and item['commit'] and item['date'], item


def _notebook(text, source='print(1)', tags=()):
    out = [nbformat.v4.new_output('stream', name='stdout', text=text)]
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_markdown_cell('# 标题'),
        nbformat.v4.new_code_cell(source, execution_count=1, outputs=out,
                                  metadata={'tags': list(tags)})])
    return json.loads(nbformat.writes(nb))


def test_the_fingerprint_is_the_outputs_only():
    nb = _notebook('加速比 1.2×\n')
    outputs = [nb['cells'][1]['outputs']]
    expected = hashlib.sha256(json.dumps(outputs, sort_keys=True).encode('utf-8')).hexdigest()
    assert gpu_check.fingerprint(nb) == expected
    assert gpu_check.fingerprint(_notebook('加速比 1.2×\n', 'print(2)', ['measured'])) == expected
    assert gpu_check.fingerprint(_notebook('加速比 1.3×\n')) != expected


def test_a_passing_entry_with_the_same_fingerprint_covers_a_notebook():
    nb, path = _notebook('准确率 0.91\n'), 'notebooks/pytorch/01_use-gpu.ipynb'
    item = {'notebook': path, 'outputs_sha256': gpu_check.fingerprint(nb), 'passed': True}
    assert gpu_check.unchecked([item], {path: nb}) == []
    assert gpu_check.unchecked([{**item, 'passed': False}], {path: nb}) == [path]
    assert gpu_check.unchecked([item], {path: _notebook('准确率 0.10\n')}) == [path]
    assert gpu_check.unchecked([{**item, 'notebook': 'other'}], {path: nb}) == [path]


def test_the_commit_comes_from_the_environment_then_git(tmp_path, monkeypatch):
    head = subprocess.run(['git', 'rev-parse', 'HEAD'], cwd=ROOT, capture_output=True,
                          text=True).stdout.strip()
    monkeypatch.setenv('D2LZH_COMMIT', 'abc123')
    assert gpu_check.commit(ROOT) == 'abc123'  # given: wins over a (maybe stale) .git
    assert gpu_check.commit(tmp_path) == 'abc123'  # a copy without .git
    monkeypatch.delenv('D2LZH_COMMIT')
    assert gpu_check.commit(ROOT) == head
    assert gpu_check.commit(tmp_path) == 'unknown'


def test_append_keeps_every_entry_one_key_a_line(tmp_path):
    record = tmp_path / 'new' / 'checks.json'
    gpu_check.append(record, {'notebook': 'a', 'passed': True})
    gpu_check.append(record, {'notebook': 'b', 'passed': False})
    assert json.loads(record.read_text(encoding='utf-8')) == [
        {'notebook': 'a', 'passed': True}, {'notebook': 'b', 'passed': False}]
    assert '  "notebook": "b",\n' in record.read_text(encoding='utf-8')
    assert [p.name for p in record.parent.iterdir()] == ['checks.json']


def _check(monkeypatch, capsys, record, passed, *paths):
    """gpu_check.main on ``paths`` with 2 GPUs named here and nbval replaced by its result."""
    monkeypatch.setattr(gpu_check, 'present_gpus', lambda: 2)
    monkeypatch.setattr(gpu_check, 'gpu_names', lambda: {'0': 'GPU 甲', '1': 'GPU 乙'})
    monkeypatch.setattr(gpu_check, 'run_one', lambda path, ids, scratch: (
        passed, '26 passed in 9.1s' if passed else '1 failed, 25 passed in 9.1s'))
    monkeypatch.delenv('CUDA_VISIBLE_DEVICES', raising=False)
    code = gpu_check.main(['--record', str(record), *paths])
    return code, capsys.readouterr().out.splitlines()


def test_a_check_appends_its_entry_with_the_outputs_fingerprint(tmp_path, monkeypatch, capsys):
    path, record = 'notebooks/pytorch/01_use-gpu.ipynb', tmp_path / 'checks.json'
    code, lines = _check(monkeypatch, capsys, record, True, path,
                         'notebooks/pytorch/06_multiple-gpus-concise.ipynb')
    assert code == 0 and lines[-1] == '检查了 1 个，跳过 1 个', lines
    [item] = json.loads(record.read_text(encoding='utf-8'))
    need = stored_gpus(_stored(path)['metadata'])
    assert item['notebook'] == path and item['passed'] is True
    assert item['result'] == '26 passed in 9.1s' and item['host_gpus'] == 2
    assert item['gpus'] == ['GPU 甲', 'GPU 乙'][:need] and item['gpu_count'] == need
    assert item['outputs_sha256'] == gpu_check.fingerprint(_stored(path))
    assert gpu_check.unchecked([item], {path: _stored(path)}) == []


def test_a_failed_check_exits_1_and_is_recorded_as_failed(tmp_path, monkeypatch, capsys):
    path, record = 'notebooks/pytorch/03_async-computation.ipynb', tmp_path / 'checks.json'
    code, lines = _check(monkeypatch, capsys, record, False, path)
    assert code == 1 and lines[-2:] == [f'没有通过：{path}', '检查了 1 个，跳过 0 个'], lines
    [item] = json.loads(record.read_text(encoding='utf-8'))
    assert item['passed'] is False and item['result'] == '1 failed, 25 passed in 9.1s'
    assert gpu_check.unchecked([item], {path: _stored(path)}) == [path]


def test_the_gpu_check_skips_what_this_machine_cannot_run(tmp_path):
    record = tmp_path / 'checks.json'
    out = subprocess.run([sys.executable, 'scripts/gpu_check.py', '--record', str(record)],
                         capture_output=True, text=True, cwd=ROOT, timeout=120,
                         env={**os.environ, 'CUDA_VISIBLE_DEVICES': ''})
    lines = out.stdout.splitlines()
    assert out.returncode == 2, out.stdout + out.stderr
    assert out.stdout.count('跳过（') == 8 and '这台机器有 0 块 GPU' in out.stdout, out.stdout
    assert 'notebooks/pytorch/06_multiple-gpus-concise.ipynb: 跳过（存储它的机器有' in out.stdout
    assert lines[-2:] == ['一个也没有检查：要求的 8 个笔记本都跳过了（原因见上面各行）',
                          '检查了 0 个，跳过 8 个'], lines
    assert not record.exists()


def test_a_notebook_not_in_the_project_is_one_line():
    name = 'nope.ipynb'
    out = subprocess.run([sys.executable, 'scripts/gpu_check.py', name], capture_output=True,
                         text=True, cwd=ROOT, timeout=120, env={**os.environ,
                                                                'CUDA_VISIBLE_DEVICES': ''})
    assert out.returncode == 1 and out.stderr == f'错误：{name} 不是 d2lzh/project.py 里的笔记本\n'
