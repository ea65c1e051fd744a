"""README's several-GPU command with each kind of data parallelism of the worker
(``--data-parallel allreduce``: AllReduceParallel, no TorchDynamo; ``ddp``), beside
README's one-GPU script, with and without a warmed bytecode cache (issue 49).

Not a test. On a machine with NVIDIA GPUs:

    python bench/bench_data_parallel.py [--gpus 1] [--launches 3] [--out bench/results]

Each launch is ``python -m d2lzh.torch.launch --nproc-per-node=N --fast --no-conv-bias
--data-parallel KIND`` (its marks: seconds from the command's start, as in
bench_ddp_scaling.py); the one-GPU script runs as in ``bench_torch.py time_to_accuracy``.
'warm_pycache': every process with ``PYTHONPYCACHEPREFIX`` (an uncounted launch of each
kind fills it),
as a pip install that byte-compiles has it; 'image_as_is': as the environment has it.
Writes ``<out>/<device>-x<N>-<date>-data-parallel.json``."""
import argparse
import datetime
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_ddp_scaling as scaling  # noqa: E402
import bench_torch  # noqa: E402
import torch  # noqa: E402

FLAGS = ['--fast', '--no-conv-bias']


def launch(n, kind, env):
    """One launch of README's command with ``--data-parallel kind``: its marks and figures."""
    r = scaling.torchrun(n, FLAGS + ['--data-parallel', kind], env=env, launcher='fork')
    res = r['result'] or {}
    return {'wall_s': r['wall_s'], 'exit_code': r['exit_code'], 'marks': res.get('marks'),
            'test_acc': res.get('test_acc'), 'cuda_graph': res.get('cuda_graph'),
            'images_per_s': res.get('images_per_s'), 'tail': r['tail'][-3:]}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--gpus', type=int, default=1)
    parser.add_argument('--launches', type=int, default=3)
    parser.add_argument('--out', type=Path, default=Path(__file__).parent / 'results')
    args = parser.parse_args()
    result = {'date': datetime.datetime.now(datetime.timezone.utc).isoformat(timespec='seconds'),
              'device': torch.cuda.get_device_name(0), 'torch': torch.__version__,
              'gpus': args.gpus, 'runs': {}}
    with tempfile.TemporaryDirectory(prefix='pycache-') as pycache:
        path = measure(args, result, pycache)
    print(f'written to {path.name}', flush=True)


def measure(args, result, pycache):
    """Every launch of ``main``, into ``result``; returns the JSON's path."""
    modes = {'warm_pycache': {'PYTHONPYCACHEPREFIX': pycache, 'PYTHONDONTWRITEBYTECODE': ''},
             'image_as_is': {}}
    for kind in ('allreduce', 'ddp'):  # fill the cache with what each imports, not counted
        launch(args.gpus, kind, modes['warm_pycache'])
    for mode, env in modes.items():
        for kind in ('allreduce', 'ddp'):
            runs = result['runs'][f'{mode} fork {kind}'] = []
            for _ in range(args.launches):
                runs.append(launch(args.gpus, kind, env))
                print(mode, kind, (runs[-1]['marks'] or {}).get('reached'), flush=True)
        cfg = dict(bench_torch._config('recipe_no_conv_bias'), max_examples='all')
        singles = result['runs'][f'{mode} one-GPU script'] = []
        for seed in range(args.launches):
            r = bench_torch.run_tta_process(dict(cfg, seed=seed), 240, None,
                                            pycache if env else None)
            singles.append({k: r.get(k) for k in ('reached_s', 'items', 'test_acc', 'error')})
            print(mode, 'one-GPU script', r.get('reached_s'), flush=True)
        path = bench_torch.write_result(result, args.out, args.gpus, '-data-parallel')
    return path


if __name__ == '__main__':
    main()
