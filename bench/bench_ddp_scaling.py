"""Data parallelism on 1, 2 and 4 GPUs against the best single GPU, in one run (beyond the
book: chapter 8.5's exercise 1, "more GPUs"), and what a failing rank costs on NCCL.

Not a test. On a machine with several NVIDIA GPUs (a CPU runs it too, on gloo and a subset,
as a smoke test):

    python bench/bench_ddp_scaling.py [--gpus 1,2,4] [--launches 3] [--out bench/results]

1. ``best_single``: the fastest single-GPU configuration, ``d2l.train_fast(d2l.resnet18(10,
   conv_bias=False), ..., d2l.FAST)`` in fresh processes (``d2l.cold_start``), images/s.
2. ``weak``: ``torchrun -m d2lzh.torch.ddp --fast --no-conv-bias`` on N GPUs, the same model and
   per-GPU batch (512) as 1., the learning rate times N (FAST's linear warm-up over 20 % of the
   steps stays); images/s, test accuracy, seconds from the command's start to 0.92 with the
   workers' marks. ``ddp2_vs_best_single``/``ddp4_vs_best_single``: median images/s over 1.'s.
3. time to accuracy (``-time-to-accuracy.json``): the same with a global batch of 512 (512/N
   per GPU, FAST's learning rate), launched by ``python -m d2lzh.torch.launch`` (its workers
   forked from the launcher, which imported torch and read the data; ``launches`` times) and by
   ``torchrun`` (once): seconds from the command's start to 0.92, with the workers' marks.
4. ``allreduce``: seconds of one all-reduce of ResNet-18's gradient (float32) on N GPUs, and
   the bus bandwidth 2(N-1)/N x bytes / seconds it implies, beside the step time.
5. ``faults`` (N >= 2; the job of 3.): on 2 GPUs rank 1 raises (``raise``) or is killed
   (``kill``) before its 2nd step, under README's command, torchrun and ``d2l.run_ddp``; on
   more, the last rank is killed under README's: seconds until the command returns (from its
   start, and from when training started in 3.'s runs), its exit code, the root cause it
   names, and the processes left on the GPUs.

Writes ``<out>/<device>-x<N>-<date>.json`` and ``...-time-to-accuracy.json`` (N: the most GPUs
used) and, with ``$OUT`` set, a copy there.
"""
import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / 'bench'))

import torch  # noqa: E402

from bench_torch import _config, _spread, run_tta_process, write_result  # noqa: E402
from d2lzh import torch as d2l  # noqa: E402
from d2lzh.torch.book import resnet18  # noqa: E402


RUN_DDP = ('import dataclasses, sys; from d2lzh.torch import ddp, launch; '
           'recipe, job = ddp._parse(sys.argv[2:]); '
           'launch.run_ddp(int(sys.argv[1]), recipe, **dataclasses.asdict(job))')


def torchrun(n, flags, env=None, timeout=180, launcher='torchrun'):
    """Run ``torchrun ... -m d2lzh.torch.ddp FLAGS`` (``launcher='fork'``: ``python -m
    d2lzh.torch.launch``, the same job with its workers forked; ``'run_ddp'``: ``d2l.run_ddp``
    from a Python process, its workers spawned) on ``n`` processes; return a dict: the seconds
    from the command's start (``wall_s``), exit code, output's tail, rank 0's result with its
    marks as seconds from the command's start (``None`` if it wrote none)."""
    with tempfile.TemporaryDirectory(prefix='ddp-bench-') as out:
        cmd = [sys.executable, '-m', 'torch.distributed.run', '--standalone', '--log-dir',
               f'{out}/logs', f'--nproc-per-node={n}', '-m', 'd2lzh.torch.ddp'] \
            if launcher == 'torchrun' else \
            [sys.executable, '-m', 'd2lzh.torch.launch', f'--nproc-per-node={n}'] \
            if launcher == 'fork' else [sys.executable, '-c', RUN_DDP, str(n)]
        cmd += [*flags, '--out', out]
        start = time.time()
        try:  # TMPDIR: torchrun's own folders go into `out` too
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                                  env=dict(os.environ, TMPDIR=out, **(env or {})))
            code, text = proc.returncode, proc.stdout + proc.stderr
        except subprocess.TimeoutExpired as err:
            code, text = 'timeout', f'{err.stdout or ""}{err.stderr or ""}'
        end, path = time.time(), Path(out, 'result.json')
        wall, result = end - start, json.loads(path.read_text()) if path.exists() else None
        errors = sorted(Path(out, 'logs').rglob('error.json'), key=lambda p: p.stat().st_mtime)
        after_error = end - errors[0].stat().st_mtime if errors else None
    if result:
        marks = {k: v - start for k, v in result.pop('marks').items()}
        train = marks['train_start']
        marks.update(startup_done=train + result['startup_s'],
                     reached=train + result['reached']['seconds'] if result['reached'] else None)
        for e, t in enumerate(result['epoch_times']):
            marks[f'epoch_{e + 1}'] = marks.get(f'epoch_{e}', marks['startup_done']) + t
        result['marks'] = marks
    lines = [ln for ln in str(text).splitlines() if ln.strip()]
    return {'wall_s': wall, 'exit_code': code, 'tail': lines[-25:], 'result': result,
            'end_after_first_error_file_s': after_error}


def ddp_runs(n, launches, flags, launcher='torchrun'):
    runs = [torchrun(n, flags, launcher=launcher) for _ in range(launches)]
    ok = [r['result'] for r in runs if r['result']]
    return {'launcher': launcher, 'flags': flags, 'runs': runs, 'images_per_s': _spread([r['images_per_s'] for r in ok]),
            'test_acc': _spread([r['test_acc'][-1] for r in ok]),
            'to_target_from_command_s': _spread([r['marks']['reached'] for r in ok]),
            'wall_s': _spread([r['wall_s'] for r in runs])}


def allreduce(n, step_s):
    nbytes = 4 * sum(p.numel() for p in resnet18(10, conv_bias=False).parameters())
    seconds = d2l.measure_allreduce(n, [nbytes], repeats=10)[0]
    return {'bytes': nbytes, 'seconds': seconds, 'step_s': step_s,
            'bus_bandwidth_GBps': 2 * (n - 1) / n * nbytes / seconds / 1e9}


def faults(n, flags, started_after):
    """With 2 processes rank 1 raises or is killed before its 2nd minibatch under each
    launcher: README's (fork), torchrun and d2l.run_ddp; with more, the last rank is killed
    under README's. The job as
    ``flags`` say. Per case: seconds from the command's start to its end, that minus
    ``started_after[launcher]`` (the median second at which training started in runs
    without a fault: about when the fault strikes), exit code, the lines naming the failure,
    the processes left on the GPUs."""
    out = {}
    cases = [(launcher, f'{kind}:1:1') for launcher in ('fork', 'torchrun', 'run_ddp')
             for kind in ('raise', 'kill')] if n == 2 else [('fork', f'kill:{n - 1}:1')]
    for launcher, fault in cases:
        run = torchrun(n, flags, env={'D2LZH_FAULT': fault}, timeout=150, launcher=launcher)
        left = subprocess.run(['nvidia-smi', '--query-compute-apps=pid', '--format=csv,noheader'],
                              capture_output=True, text=True).stdout.split() \
            if d2l.num_gpus() else []
        root = [ln for ln in run['tail'] if 'rank' in ln or 'Error' in ln or 'exitcode' in ln]
        start = started_after.get(launcher)
        out[f'{launcher} {fault}'] = {
            'seconds': run['wall_s'], 'exit_code': run['exit_code'],
            'after_training_started_s': run['wall_s'] - start if start else None,
            'end_after_first_error_file_s': run['end_after_first_error_file_s'],
            'root_cause_lines': root[-8:], 'gpu_processes_left': len(left)}
        print(f"fault {fault} under {launcher}: ended {run['wall_s']:.1f} s after the command's "
              f"start (exit {run['exit_code']})", flush=True)
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--gpus', default='1,2,4', help='process counts to run (those > the '
                        "machine's GPUs are left out; on a CPU: 1,2 on gloo)")
    parser.add_argument('--launches', type=int, default=3)
    parser.add_argument('--epochs', type=int, default=2)
    parser.add_argument('--max-examples', default='all')
    parser.add_argument('--out', type=Path, default=ROOT / 'bench' / 'results')
    parser.add_argument('--no-weak', action='store_true', help='leave out 2. and 4. (weak '
                        'scaling and the all-reduce): time to accuracy and faults only')
    args = parser.parse_args()
    gpus = d2l.num_gpus()
    counts = [n for n in map(int, args.gpus.split(',')) if n <= max(gpus, 2)]
    base = ['--fast', '--no-conv-bias', '--epochs', str(args.epochs), '--eval-from',
            str(args.epochs), '--max-examples', args.max_examples, '--timeout', '120']
    result = {'date': datetime.datetime.now(datetime.timezone.utc).isoformat(timespec='seconds'),
              'device': d2l.gpu_name(0) if gpus else platform.processor() or 'cpu',
              'gpus': gpus, 'torch': torch.__version__, 'cuda': torch.version.cuda,
              'nccl': '.'.join(map(str, torch.cuda.nccl.version())) if gpus else None,
              'python': platform.python_version(), 'launches': args.launches}
    single = [run_tta_process(dict(_config(f'recipe_no_conv_bias+epochs={args.epochs}'), seed=s,
                                   max_examples=args.max_examples), 300)
              for s in range(args.launches)]
    best = _spread([r.get('images_per_s') for r in single])
    result['best_single'] = {'runs': single, 'images_per_s': best}
    print(f"best single GPU: {best['mean'] if best else float('nan'):.0f} images/s", flush=True)
    result['weak'], result['allreduce'], tta = {}, {}, {}
    for n in counts:
        lr = f'{d2l.FAST.lr * n:g}'
        weak = ddp_runs(n, 0 if args.no_weak else args.launches, base + ['--lr', lr])
        result['weak'][n] = weak
        ips = weak['images_per_s']
        if ips and best:
            result[f'ddp{n}_vs_best_single'] = statistics.median(
                r['result']['images_per_s'] for r in weak['runs'] if r['result']) / \
                statistics.median(r['images_per_s'] for r in single if 'images_per_s' in r)
        print(f"DDP on {n}: {ips['mean'] if ips else float('nan'):.0f} images/s, "
              f"{result.get(f'ddp{n}_vs_best_single', float('nan')):.2f}x the best single",
              flush=True)
        strong = base + ['--batch-size', str(d2l.FAST.batch_size // n)]
        tta[n] = {launcher: ddp_runs(n, args.launches if launcher == 'fork' else 1, strong,
                                     launcher) for launcher in ('fork', 'torchrun')}
        print(f"to 0.92 on {n}, global batch {d2l.FAST.batch_size}, from the command's start: "
              + ', '.join(f"{k} {v['to_target_from_command_s']['mean']:.1f} s"
                          for k, v in tta[n].items() if v['to_target_from_command_s']), flush=True)
        if n > 1 and not args.no_weak:
            if gpus >= n:
                step = d2l.FAST.batch_size * n / ips['mean'] if ips else None
                result['allreduce'][n] = allreduce(n, step)
    result['faults'] = {}
    for n in [n for n in counts if n >= 2]:
        strong = base + ['--batch-size', str(d2l.FAST.batch_size // n)]
        started = {launcher: statistics.median(r['result']['marks']['train_start']
                                               for r in tta[n][launcher]['runs'] if r['result'])
                   for launcher in ('fork', 'torchrun') if any(r['result'] for r in
                                                               tta[n][launcher]['runs'])}
        started['run_ddp'] = started.get('fork')  # spawned, not forked: later, if anything
        result['faults'][n] = faults(n, strong, started)
    paths = [write_result(result, args.out, max(counts)),
             write_result({**{k: result[k] for k in ('date', 'device', 'gpus', 'torch', 'cuda',
                                                       'nccl', 'python', 'launches')},
                           'global_batch': d2l.FAST.batch_size, 'by_gpus': tta},
                          args.out, max(counts), '-time-to-accuracy')]
    print(json.dumps({k: v for k, v in result.items() if k.startswith('ddp')}), flush=True)
    print(f'written to {", ".join(p.name for p in paths)}', flush=True)


if __name__ == '__main__':
    main()
