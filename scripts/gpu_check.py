"""The GPU check (``make test-gpu``): nbval on the PyTorch notebooks, each on as many GPUs as
the machine that stored it had, against its stored outputs.

    python scripts/gpu_check.py [NOTEBOOK ...]      (default: every PyTorch notebook)

A notebook stored on N GPUs (its metadata ``d2lzh.stored_gpus``, tests/nbval_tags.py) runs with
``CUDA_VISIBLE_DEVICES`` set to the first N GPUs, on the data of the stored run (no
``$D2LZH_MAX_EXAMPLES``), so that the cells tagged ``stored-machine`` and ``stored-data`` are
compared too (numbers masked where tagged ``measured``); one with fewer GPUs than that here is
skipped with a line that says so. An MXNet notebook named here (stored on a CPU) runs on the
CPU the same way, for its ``stored-data`` cells (minutes: all the data). Prints one summary line
per notebook and exits 1 when one failed. No GPU at all: every PyTorch notebook is skipped.
"""
import argparse
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


def run_one(path, gpus, scratch):
    """nbval on notebook ``path`` with the first ``gpus`` GPUs; (passed, summary words)."""
    visible = os.environ.get('CUDA_VISIBLE_DEVICES')  # the first gpus of those visible
    ids = visible.split(',')[:gpus] if visible else [str(i) for i in range(gpus)]
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
    parser.add_argument('notebooks', nargs='*', help='default: every PyTorch notebook')
    paths = parser.parse_args(argv).notebooks or project.notebooks('pytorch')
    here, failed = present_gpus(), []
    print(f'这台机器有 {here} 块 GPU。')
    with tempfile.TemporaryDirectory(prefix='d2lzh-gpu-check-') as scratch:
        for path in paths:
            nb = project.find(path)
            if nb is None:
                sys.exit(f'error: {path} is not a notebook of d2lzh/project.py')
            need = stored_gpus(json.loads((ROOT / nb.path).read_text(encoding='utf-8'))['metadata'])
            if (need == 0 and nb.edition == 'pytorch') or here < need:
                why = '存储的输出来自 CPU' if need == 0 else f'存储它的机器有 {need} 块 GPU，这里只有 {here} 块'
                print(f'{nb.path}: 跳过（{why}）')
                continue
            start = time.perf_counter()
            ok, words = run_one(nb.path, need, Path(scratch))
            where = f'{need} 块 GPU' if need else 'CPU，与存储时相同的数据'
            print(f'{nb.path}: {words}，{where}，{time.perf_counter() - start:.0f} 秒',
                  flush=True)
            if not ok:
                failed.append(nb.path)
    if failed:
        print('没有通过：' + '、'.join(failed))
    return 1 if failed else 0


if __name__ == '__main__':
    sys.exit(main())
