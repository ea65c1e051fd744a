"""The GPU check (``make test-gpu``): nbval on the PyTorch notebooks, each on as many GPUs as
the machine that stored it had, against its stored outputs.

    python scripts/gpu_check.py [NOTEBOOK ...]      (default: every PyTorch notebook)

A notebook stored on N GPUs (its metadata ``d2lzh.stored_gpus``, tests/nbval_tags.py) runs with
``CUDA_VISIBLE_DEVICES`` set to the first N GPUs, on the data of the stored run (no
``$D2LZH_MAX_EXAMPLES``), so that the cells tagged ``stored-machine`` and ``stored-data`` are
compared too (numbers masked where tagged ``measured``); one with fewer GPUs than that here is
skipped with a line that says so. An MXNet notebook named here (stored on a CPU) runs on the
CPU the same way, for its ``stored-data`` cells (minutes: all the data). Prints one summary line
per notebook, ends with "检查了 N 个，跳过 M 个", and exits 1 when one failed, 2 when every
notebook asked was skipped (no GPU at all: every PyTorch notebook is).

Each notebook checked appends one entry to the record (``--record``, default
tests/data/gpu-checks.json, a JSON list): the commit, the date, the GPUs, the notebook, the
result line, whether it passed, and the fingerprint of the notebook's stored outputs taken before
the run (``outputs_sha256``). tests/test_gpu_check.py fails when a PyTorch notebook's stored
outputs have no passing entry with their fingerprint.
"""
import argparse
import datetime
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / 'tests'))
from d2lzh import project  # noqa: E402
from nbval_tags import present_gpus, stored_gpus  # noqa: E402

RECORD = ROOT / 'tests' / 'data' / 'gpu-checks.json'


def fingerprint(nb):
    """sha256 of the stored outputs of notebook ``nb`` (its JSON as a dict): every code cell's
    outputs, in order, as JSON with sorted keys."""
    outputs = [c.get('outputs', []) for c in nb['cells'] if c['cell_type'] == 'code']
    return hashlib.sha256(json.dumps(outputs, sort_keys=True).encode('utf-8')).hexdigest()


def commit(root=ROOT):
    """The commit checked: $D2LZH_COMMIT where set (a copy sent to a rented GPU machine may
    carry a stale .git of another commit), else ``git rev-parse HEAD`` where ``root`` has a
    .git, else 'unknown'."""
    given = os.environ.get('D2LZH_COMMIT', '').strip()
    if given:
        return given
    if (Path(root) / '.git').exists():
        out = subprocess.run(['git', 'rev-parse', 'HEAD'], cwd=root, capture_output=True,
                             text=True)
        if out.returncode == 0:
            return out.stdout.strip()
    return 'unknown'


def gpu_names():
    """{index: name} of this machine's GPUs by nvidia-smi (which ignores CUDA_VISIBLE_DEVICES),
    else by torch.cuda; {} without either."""
    try:
        out = subprocess.run(['nvidia-smi', '--query-gpu=index,name', '--format=csv,noheader'],
                             capture_output=True, text=True, timeout=60)
        rows = [ln.split(',', 1) for ln in out.stdout.splitlines() if ',' in ln]
        if out.returncode == 0 and rows:
            return {i.strip(): name.strip() for i, name in rows}
    except (OSError, subprocess.TimeoutExpired):
        pass
    try:
        import torch
        return {str(i): torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())}
    except Exception:  # no torch, or no driver: the record says no names
        return {}


def entry(path, nb, ids, names, passed, result):
    """One record entry: notebook ``path`` (its JSON ``nb``) checked on the GPUs ``ids``."""
    return {'notebook': path, 'commit': commit(),
            'date': datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%dT%H:%M:%SZ'),
            'gpus': [names.get(i, i) for i in ids], 'gpu_count': len(ids),
            'host_gpus': len(names), 'result': result, 'passed': passed,
            'outputs_sha256': fingerprint(nb)}


def append(record, item):
    """Append ``item`` to the JSON list in file ``record`` (created if missing), one key a line."""
    record = Path(record)
    items = json.loads(record.read_text(encoding='utf-8')) if record.exists() else []
    record.parent.mkdir(parents=True, exist_ok=True)
    items.append(item)
    part = record.with_name(record.name + '.part')
    part.write_text(json.dumps(items, indent=1, ensure_ascii=False) + '\n', encoding='utf-8')
    part.replace(record)


def unchecked(record_items, notebooks):
    """The paths of ``notebooks`` ({path: JSON}) whose stored outputs have no passing entry
    with their fingerprint in ``record_items`` (the record's list)."""
    checked = {(e['notebook'], e['outputs_sha256']) for e in record_items if e.get('passed')}
    return [path for path, nb in notebooks.items() if (path, fingerprint(nb)) not in checked]


def gpu_ids(gpus):
    """The first ``gpus`` GPUs of those visible here (CUDA_VISIBLE_DEVICES's entries)."""
    visible = os.environ.get('CUDA_VISIBLE_DEVICES')
    return visible.split(',')[:gpus] if visible else [str(i) for i in range(gpus)]


def run_one(path, ids, scratch):
    """nbval on notebook ``path`` with the GPUs ``ids``; (passed, summary words)."""
    env = dict(os.environ, CUDA_VISIBLE_DEVICES=','.join(ids),
               TMPDIR=str(scratch), D2LZH_OUTPUT_DIR=str(scratch / 'output'))
    env.pop('D2LZH_MAX_EXAMPLES', None)  # all the data, as the stored run
    out = subprocess.run(
        [sys.executable, '-m', 'pytest', '--nbval', '--nbval-current-env', '-p', 'no:cacheprovider',
         '--nbval-sanitize-with', 'tests/nbval_sanitize.cfg', '-q', path],
        cwd=ROOT, env=env, capture_output=True, text=True)
    last = [ln for ln in out.stdout.splitlines() if re.search(r'\d+ (passed|failed)', ln)]
    if out.returncode != 0:
        sys.stdout.write(out.stdout[-6000:] + out.stderr[-2000:])
    return out.returncode == 0, (last[-1].strip('= ') if last else f'exit {out.returncode}')


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('notebooks', nargs='*', help='默认：每个 PyTorch 版笔记本')
    parser.add_argument('--record', default=RECORD, type=Path,
                        help='每检查一个笔记本就在这个 JSON 列表文件里加一条（默认 %(default)s）')
    args = parser.parse_args(argv)
    paths = args.notebooks or project.notebooks('pytorch')
    here, failed, checked = present_gpus(), [], 0
    names = gpu_names() if here else {}
    print(f'这台机器有 {here} 块 GPU。')
    with tempfile.TemporaryDirectory(prefix='d2lzh-gpu-check-') as scratch:
        for path in paths:
            nb = project.find(path)
            if nb is None:
                sys.exit(f'错误：{path} 不是 d2lzh/project.py 里的笔记本')
            stored = json.loads((ROOT / nb.path).read_text(encoding='utf-8'))
            need = stored_gpus(stored['metadata'])
            if (need == 0 and nb.edition == 'pytorch') or here < need:
                why = '存储的输出来自 CPU' if need == 0 else f'存储它的机器有 {need} 块 GPU，这里只有 {here} 块'
                print(f'{nb.path}: 跳过（{why}）')
                continue
            start, ids = time.perf_counter(), gpu_ids(need)
            ok, words = run_one(nb.path, ids, Path(scratch))
            checked += 1
            append(args.record, entry(nb.path, stored, ids, names, ok, words))
            where = f'{need} 块 GPU' if need else 'CPU，与存储时相同的数据'
            print(f'{nb.path}: {words}，{where}，{time.perf_counter() - start:.0f} 秒',
                  flush=True)
            if not ok:
                failed.append(nb.path)
    if failed:
        print('没有通过：' + '、'.join(failed))
    elif not checked:
        print(f'一个也没有检查：要求的 {len(paths)} 个笔记本都跳过了（原因见上面各行）')
    print(f'检查了 {checked} 个，跳过 {len(paths) - checked} 个')
    return 1 if failed else 2 if not checked else 0


if __name__ == '__main__':
    sys.exit(main())
