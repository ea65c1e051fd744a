"""Reproduce the PyTorch edition's GPU figures and write them as JSON.

Not a test: run it on a machine with one or two NVIDIA GPUs (it also runs on a
CPU with a small subset, for a smoke test). It measures, in one process and
one run, on ResNet-18 (the d2lzh variant) / Fashion-MNIST, batch 256 per GPU:

1. images/s of the training loop as each technique is added to the book-style
   loop (host batches, fp32): pinned memory, GPU-resident data,
   cudnn.benchmark, bf16 autocast, channels_last, torch.compile, a CUDA graph
   of the whole step, and torch.compile inside that graph;
2. the test accuracy of the fastest single-GPU configuration after 4 epochs;
3. DistributedDataParallel on 1 and 2 GPUs (one process per GPU, NCCL) with
   eager steps, on 1 GPU also with the whole step (all-reduce included)
   recorded as a CUDA graph, and nn.DataParallel on 2 GPUs beside it;
4. a GPU->CPU copy into pinned memory and into pageable memory.

    python bench/bench_torch.py [--out bench/results] [--epochs 2] [--max-examples N]

Writes ``<out>/<device>-<date>.json`` with the device name, torch and CUDA
versions, the date and every figure, and prints a summary table.

    python bench/bench_torch.py time_to_accuracy [--configs a,b] [--repeats 3]

measures time to accuracy instead: for each configuration (``TTA_CONFIGS``), a
fresh process (``d2l.cold_start``, the program notebook 07 runs too) per repeat, wall time from its start to
the first test accuracy >= 0.92 on the full 10,000-image test set, itemized,
and writes ``<out>/<device>-x1-<date>-time-to-accuracy.json``. A config name ending in
``+warm_pycache`` runs its processes with a warmed bytecode cache (``PYTHONPYCACHEPREFIX``,
``--pycache DIR`` or a new folder; one unmeasured process fills it first), as a user's pip
install has one; without it they run as the environment has them (the GPU machines' image:
``PYTHONDONTWRITEBYTECODE=1``, no ``.pyc`` for torch, so every process compiles it again).
"""
import argparse
import dataclasses
import datetime
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from d2lzh import torch as d2l  # noqa: E402

# notebook 07's ladder (d2l.LADDER): (name, configuration); 'book' runs on the CPU too
STEPS = [(name, d2l.ladder_configs()[key]) for key, name, _, _, _ in d2l.LADDER]
# d2l.Recipe fields of the accuracy run and the DDP runs (speed does not depend on them).
RECIPE = {'momentum': 0.9, 'weight_decay': 5e-4, 'lr_schedule': 'cosine'}
# nn.DataParallel is slow enough to dominate the run: time it on a subset.
DP_EXAMPLES = 15360


def write_result(result, out_dir, n_gpu, suffix=''):
    """Write ``result`` (a dict with 'device' and an ISO 'date') as indented JSON to
    ``out_dir/<device>-x<n_gpu>-<day><suffix>.json`` and, with ``$OUT`` set, a copy there
    (the device machine's way back); returns the first path."""
    out_dir.mkdir(parents=True, exist_ok=True)
    slug = re.sub(r'[^A-Za-z0-9]+', '-', result['device']).strip('-')
    path = out_dir / f"{slug}-x{n_gpu}-{result['date'][:10]}{suffix}.json"
    for folder in [out_dir, *filter(None, [os.environ.get('OUT')])]:
        (Path(folder) / path.name).write_text(json.dumps(result, indent=2) + '\n')
    return path


def run_step(config, epochs, batch_size, lr, max_examples, device, **recipe):
    """Load the data where the ladder's ``config`` puts it and train one step of it
    (``d2l.train_ladder_step``, as notebook 07 does); return the history."""
    on_gpu = device.type == 'cuda'
    train_iter, test_iter = d2l.load_data_fashion_mnist(
        batch_size, max_examples=max_examples,
        device=device if config['data'] == 'gpu' and on_gpu else None,
        pin_memory=config['data'] == 'pinned' and on_gpu)
    return d2l.train_ladder_step(config, train_iter, test_iter, epochs, lr, device,
                                 verbose=False, **recipe)


def copy_times(nbytes, repeats=3):
    """Best seconds for a GPU->CPU copy of ``nbytes`` into pageable and pinned memory."""
    n = nbytes // 4
    src = torch.randn(n, device='cuda')
    pageable = torch.empty(n, dtype=torch.float32)
    pinned = torch.empty(n, dtype=torch.float32, pin_memory=True)
    out = {}
    for name, dst in (('pageable', pageable), ('pinned', pinned)):
        best = float('inf')
        for _ in range(repeats):
            torch.cuda.synchronize()
            start = time.perf_counter()
            dst.copy_(src, non_blocking=(name == 'pinned'))
            torch.cuda.synchronize()
            best = min(best, time.perf_counter() - start)
        assert torch.equal(dst[:1000], src[:1000].cpu())
        out[name] = best
    return out


# ------------------------------------------------------------ time to accuracy
# Each configuration: cudnn.benchmark, whether the data lives on the GPU, and the
# fields of the d2l.Recipe that d2l.train_fast runs ('recipe'). 'before' rows are the
# paths of notebook 07 as issue 11 measured them (cosine lr per epoch, evaluation
# after every epoch); 'recipe' is d2l.FAST; each 'recipe_*' row changes exactly one
# thing of it.
_OLD = {'batch_size': 256, 'epochs': 4, 'lr': 0.1, 'momentum': 0.9, 'weight_decay': 5e-4,
        'lr_schedule': 'cosine'}
TTA_CONFIGS = {
    'book_fp32': {'cudnn_benchmark': False, 'gpu_data': False, 'conv_bias': True,
                  'recipe': {**_OLD, 'amp': 'off', 'channels_last': False}},
    'bf16_cl_eager': {'cudnn_benchmark': True, 'conv_bias': True, 'recipe': _OLD},
    'cuda_graph': {'cudnn_benchmark': True, 'conv_bias': True,
                   'recipe': {**_OLD, 'cuda_graph': True}},
    'graph_compile': {'cudnn_benchmark': True, 'conv_bias': True,
                      'recipe': {**_OLD, 'cuda_graph': True, 'compile': True}},
    'recipe': {'cudnn_benchmark': False, 'conv_bias': True,
               'recipe': dataclasses.asdict(d2l.FAST)},
}
# the settings of d2l.cold_start's config, and this bench's (compile_cache, warm_pycache)
SETTINGS = ('cudnn_benchmark', 'gpu_data', 'conv_bias', 'target', 'compile_cache', 'warm_pycache')


def _variant(name, **changes):
    TTA_CONFIGS['recipe_' + name] = _config('recipe', changes)


def _config(name, changes=None):
    """A config of TTA_CONFIGS, or an ad-hoc one: ``base+key=value+...`` changes ``base``
    (values are JSON, ``+key`` alone is ``+key=true``; SETTINGS are the child's, other keys
    fields of d2l.Recipe; a new number of epochs moves an eval_from > 1 to the last epoch)."""
    base, *pairs = name.split('+')
    cfg = json.loads(json.dumps(TTA_CONFIGS[base]))
    pairs = [p.split('=', 1) if '=' in p else (p, 'true') for p in pairs]
    changes = {**dict((k, json.loads(v)) for k, v in pairs),
               **(changes or {})}
    for key, value in changes.items():
        (cfg if key in SETTINGS else cfg['recipe'])[key] = value
    if 'epochs' in changes and 'eval_from' not in changes and \
            cfg['recipe'].get('eval_from', 1) > 1:
        cfg['recipe']['eval_from'] = changes['epochs']
    d2l.Recipe(**cfg['recipe'])  # valid, or ValueError naming the fix
    return cfg


_E, _LR = d2l.FAST.epochs, d2l.FAST.lr
_variant('cudnn_benchmark', cudnn_benchmark=True)
_variant('eval_every_epoch', eval_from=1)
_variant('no_label_smoothing', label_smoothing=0.0)
_variant('no_nesterov', nesterov=False)
_variant('cosine_per_epoch', lr_schedule='cosine', lr_warmup=0.0)
_variant('eager', cuda_graph=False)
_variant('fp32', amp='off')
_variant('no_channels_last', channels_last=False)
_variant('bs256', batch_size=256, lr=_LR / 2)
_variant('bs1024', batch_size=1024, lr=_LR * 2)
_variant('lr_half', lr=_LR / 2)
_variant('lr_double', lr=_LR * 2)
_variant('epochs_minus_1', epochs=_E - 1)
_variant('epochs_plus_1', epochs=_E + 1)
_variant('weight_decay_1e-4', weight_decay=1e-4)
# d2l.resnet18(10, conv_bias=False): what README recommends, d2l.cold_start's default
_variant('no_conv_bias', conv_bias=False)
# torch.compile with a warm compile cache: one unmeasured process fills it first
_variant('compile_warm_cache', compile=True, compile_cache=True)
# Steady throughput (no target): the recipe's CUDA graph with torch.compile inside.
for _bs in (256, 512, 1024):
    _variant(f'steady_compile_bs{_bs}', batch_size=_bs, lr=_LR * _bs / 512, compile=True,
             target_accuracy=None)
    _variant(f'steady_graph_bs{_bs}', batch_size=_bs, lr=_LR * _bs / 512, target_accuracy=None)


def _spread(values):
    values = [v for v in values if v is not None]
    if not values:
        return None
    return {'mean': statistics.fmean(values), 'min': min(values), 'max': max(values),
            'stdev': statistics.stdev(values) if len(values) > 1 else 0.0, 'n': len(values)}


def run_tta_process(cfg, timeout, cache=None, pycache=None):
    """One fresh process of ``d2l.cold_start`` (``cfg``: its config); returns its ``items``
    (seconds of each stage), ``reached_s``, ``total_s`` and the history's ``test_acc``,
    ``images_per_s``, ``epoch_times``, or ``{'error': ...}``. Its compile caches are in
    the folder ``cache`` (None: an empty one, a cold compile), its bytecode cache in the
    folder ``pycache`` (None: as this environment has it)."""
    with tempfile.TemporaryDirectory(prefix='tta-') as tmp:
        cache = cache or tmp
        env = {'PYTHONUNBUFFERED': '1', 'TORCHINDUCTOR_CACHE_DIR': os.path.join(cache, 'inductor'),
               'TRITON_CACHE_DIR': os.path.join(cache, 'triton')}
        if pycache:  # '' clears the image's PYTHONDONTWRITEBYTECODE=1
            env.update(PYTHONPYCACHEPREFIX=pycache, PYTHONDONTWRITEBYTECODE='')
        try:
            r = d2l.cold_start(cfg, timeout, env)
        except RuntimeError as err:
            return {'error': str(err)[-2000:]}
    h = r['history']
    return {'reached_s': r['reached_s'], 'total_s': r['total_s'], 'items': r['items'],
            'test_acc': h['test_acc'], 'epochs_run': len(h['epoch_times']),
            'epoch_times': h['epoch_times'], 'images_per_s': h['images_per_s'],
            'amp_dtype': h['amp']}


def time_to_accuracy(argv):
    """The ``time_to_accuracy`` entry: see the module docstring."""
    parser = argparse.ArgumentParser(prog='bench_torch.py time_to_accuracy')
    parser.add_argument('--configs', default='book_fp32,bf16_cl_eager,cuda_graph,'
                        'graph_compile,recipe', help='comma-separated names of TTA_CONFIGS, '
                        "or 'all'")
    parser.add_argument('--repeats', type=int, default=3, help='fresh processes per config')
    parser.add_argument('--seed', type=int, default=0, help='seed of the first repeat')
    parser.add_argument('--timeout', type=float, default=240, help='seconds per process')
    parser.add_argument('--out', type=Path, default=ROOT / 'bench' / 'results')
    parser.add_argument('--max-examples', default='all')
    parser.add_argument('--pycache', metavar='DIR', help="bytecode cache (PYTHONPYCACHEPREFIX) "
                        "of the configs named '...+warm_pycache' (default: a new folder each)")
    args = parser.parse_args(argv)
    names = list(TTA_CONFIGS) if args.configs == 'all' else args.configs.split(',')
    unknown = [n for n in names if n.split('+')[0] not in TTA_CONFIGS]
    if unknown:
        parser.error(f'unknown configs {unknown}; known: {", ".join(TTA_CONFIGS)}')
    n_gpu = d2l.num_gpus()
    result = {
        'date': datetime.datetime.now(datetime.timezone.utc).isoformat(timespec='seconds'),
        'device': d2l.gpu_name(0) if n_gpu else platform.processor() or 'cpu',
        'torch': torch.__version__, 'cuda': torch.version.cuda, 'python':
        platform.python_version(), 'target_accuracy': 0.92, 'repeats': args.repeats,
        'max_examples': args.max_examples, 'configs': {},
    }
    print(f"{result['device']}, torch {result['torch']}, CUDA {result['cuda']}", flush=True)
    print(f"{'config':28s} {'to 0.92 (s)':>18s} {'final acc':>9s} {'images/s':>9s}  items (mean s)",
          flush=True)
    for name in names:
        runs, extra = [], {}
        with tempfile.TemporaryDirectory(prefix='tta-cache-') as cache:
            warm = _config(name).get('compile_cache')
            pycache = _config(name).get('warm_pycache') and (args.pycache or
                                                             os.path.join(cache, 'pycache'))
            extra['pycache'] = (
                'warm: PYTHONPYCACHEPREFIX='
                + ('--pycache' if args.pycache else '<a new folder>')
                + ', filled by one process first (cache_filling_run, not counted)' if pycache else
                'as the environment has it: PYTHONDONTWRITEBYTECODE='
                f"{os.environ.get('PYTHONDONTWRITEBYTECODE')!r}, PYTHONPYCACHEPREFIX="
                f"{os.environ.get('PYTHONPYCACHEPREFIX')!r}")
            for r in range(-1 if warm or pycache else 0, args.repeats):  # -1: fills the caches
                cfg = dict(_config(name), seed=args.seed + max(r, 0),
                           max_examples=args.max_examples)
                try:
                    run = run_tta_process(cfg, args.timeout, cache if warm else None, pycache)
                except subprocess.TimeoutExpired:
                    run = {'error': f'no result within {args.timeout} s'}
                if r < 0:
                    extra['cache_filling_run'] = run
                else:
                    runs.append(run)
        ok = [r for r in runs if 'error' not in r]
        entry = {'config': _config(name), 'runs': runs, **extra,
                 'reached_s': _spread([r['reached_s'] for r in ok]),
                 'reached_in': sum(r['reached_s'] is not None for r in ok),
                 'final_acc': _spread([r['test_acc'][-1] for r in ok]),
                 'images_per_s': _spread([r['images_per_s'] for r in ok]),
                 'total_s': _spread([r['total_s'] for r in ok]),
                 'items': {k: _spread([r['items'][k] for r in ok])
                           for k in (ok[0]['items'] if ok else [])}}
        result['configs'][name] = entry
        # after each config, so that a run stopped later keeps what it measured
        path = write_result(result, args.out, 1, '-time-to-accuracy')
        if not ok:
            print(f'{name:28s} failed: {runs[0]["error"][-300:]}', flush=True)
            continue
        rs = entry['reached_s']
        reach = (f"{rs['mean']:6.2f} [{rs['min']:.2f},{rs['max']:.2f}] {entry['reached_in']}/"
                 f"{len(ok)}" if rs else f'never ({len(ok)} runs)')
        items = ' '.join(f"{k}={v['mean']:.2f}" for k, v in entry['items'].items())
        print(f"{name:28s} {reach:>18s} {entry['final_acc']['mean']:9.4f} "
              f"{entry['images_per_s']['mean']:9.0f}  {items}", flush=True)
    print(f'written to {path.name}', flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--out', type=Path, default=ROOT / 'bench' / 'results')
    parser.add_argument('--epochs', type=int, default=2, help='epochs per step (best is kept)')
    parser.add_argument('--accuracy-epochs', type=int, default=4)
    parser.add_argument('--batch-size', type=int, default=256)
    parser.add_argument('--lr', type=float, default=0.1)
    parser.add_argument('--max-examples', default=None, help="N or 'all' (default: all)")
    parser.add_argument('--copy-gib', type=float, default=2.0)
    parser.add_argument('--ddp-timeout', type=float, default=300,
                        help='seconds before a DDP run is abandoned')
    parser.add_argument('--skip', default='', help='comma-separated step names to leave out, '
                        "e.g. 'compile' (its first epoch compiles for about a minute)")
    args = parser.parse_args()
    device = d2l.try_gpu()
    n_gpu = d2l.num_gpus()
    max_examples = args.max_examples or 'all'
    result = {
        'date': datetime.datetime.now(datetime.timezone.utc).isoformat(timespec='seconds'),
        'device': d2l.gpu_name(0) if n_gpu else platform.processor() or 'cpu',
        'num_gpus': n_gpu, 'torch': torch.__version__, 'cuda': torch.version.cuda,
        'cudnn': torch.backends.cudnn.version() if n_gpu else None,
        'python': platform.python_version(), 'batch_size_per_gpu': args.batch_size,
        'lr': args.lr, 'max_examples': max_examples, 'epochs_per_step': args.epochs,
        'steps': [],
    }
    print(f"{result['device']} x{n_gpu}, torch {result['torch']}, CUDA {result['cuda']}",
          flush=True)
    skip = set(filter(None, args.skip.split(',')))
    result['skipped_steps'] = sorted(skip)
    for name, config in STEPS:
        if (name != 'book' and device.type != 'cuda') or name in skip:
            continue
        h = run_step(config, args.epochs, args.batch_size, args.lr, max_examples, device)
        step = {'name': name, 'config': config, 'images_per_s': h['images_per_s'],
                'epoch_times_s': h['epoch_times'], 'test_acc': h['test_acc'][-1]}
        result['steps'].append(step)
        print(f"{name:16s} {h['images_per_s']:9.0f} images/s  epochs {h['epoch_times']}",
              flush=True)
    book = result['steps'][0]['images_per_s']
    best = max(result['steps'], key=lambda s: s['images_per_s'])
    result['speedup_vs_book'] = best['images_per_s'] / book
    best_config = dict(STEPS)[best['name']]
    h = run_step(best_config, args.accuracy_epochs, args.batch_size, args.lr, max_examples,
                 device, **RECIPE)
    result['accuracy_run'] = {'config': best['name'], 'recipe': RECIPE,
                              'epochs': args.accuracy_epochs,
                              'test_acc': h['test_acc'], 'epoch_times_s': h['epoch_times'],
                              'images_per_s': h['images_per_s']}
    print(f"accuracy after {args.accuracy_epochs} epochs ({best['name']}): "
          f"{h['test_acc'][-1]:.4f}", flush=True)
    if n_gpu >= 1:
        ddp = {}
        for graph in (False, True):
            # one process with the graph (bench_ddp_scaling.py measures several: they run since
            # the worker follows PyTorch's conditions for capturing DDP, d2lzh/torch/ddp.py)
            for world in [1] if graph else sorted({1, min(2, n_gpu)}):
                key = f"{world}{'_graph' if graph else ''}"
                try:
                    recipe = d2l.Recipe(epochs=args.epochs + 1, batch_size=args.batch_size,
                                        lr=args.lr, cuda_graph=graph, **RECIPE)
                    r = d2l.run_ddp(world, recipe, max_examples=max_examples,
                                    timeout=args.ddp_timeout)
                except (RuntimeError, TimeoutError) as err:
                    ddp[key] = {'error': str(err)}
                    print(f'DDP x{world} cuda_graph={graph} failed: {err}', flush=True)
                    continue
                ddp[key] = {'images_per_s': r['images_per_s'], 'cuda_graph': graph,
                            'epoch_times_s': r['epoch_times'], 'test_acc': r['test_acc']}
                print(f'DDP x{world} cuda_graph={graph}: {r["images_per_s"]:.0f} images/s '
                      f'{r["epoch_times"]}', flush=True)
        result['ddp'] = ddp
        for suffix in ('', '_graph'):
            one, two = ddp.get('1' + suffix, {}), ddp.get('2' + suffix, {})
            if 'images_per_s' in one and 'images_per_s' in two:
                result['ddp_scaling_2_vs_1' + suffix] = two['images_per_s'] / one['images_per_s']
        if 'images_per_s' in ddp.get('2', {}):  # two GPUs against the best one-GPU path
            result['ddp2_vs_best_single'] = ddp['2']['images_per_s'] / best['images_per_s']
        if n_gpu >= 2:
            devices = d2l.try_devices(2)
            torch.manual_seed(0)
            torch.backends.cudnn.benchmark = False  # as in notebook 06
            for bs, key in ((args.batch_size, 'dp_1gpu'), (2 * args.batch_size, 'dp_2gpu')):
                train_iter, test_iter = d2l.load_data_fashion_mnist(
                    bs, max_examples=DP_EXAMPLES, device=devices[0])
                h = d2l.train_data_parallel(d2l.resnet18(10), train_iter, test_iter,
                                            args.epochs, args.lr,
                                            devices if key == 'dp_2gpu' else devices[:1],
                                            verbose=False)
                result[key] = {'images_per_s': h['images_per_s'], 'examples': DP_EXAMPLES,
                               'epoch_times_s': h['epoch_times'], 'batch_size': bs}
                print(f"{key}: {h['images_per_s']:.0f} images/s", flush=True)
        nbytes = int(args.copy_gib * 2**30)
        times = copy_times(nbytes)
        result['copy_gpu_to_cpu'] = {'bytes': nbytes, 'pageable_s': times['pageable'],
                                     'pinned_s': times['pinned'],
                                     'ratio': times['pageable'] / times['pinned']}
        print(f"copy {args.copy_gib} GiB GPU->CPU: pageable {times['pageable']:.3f} s, "
              f"pinned {times['pinned']:.3f} s", flush=True)
    path = write_result(result, args.out, n_gpu)
    print(f"\nspeed-up of the fastest single-GPU step over the book-style loop: "
          f"{result['speedup_vs_book']:.2f}x; written to {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}")


if __name__ == '__main__':
    if sys.argv[1:2] == ['time_to_accuracy']:
        time_to_accuracy(sys.argv[2:])
    else:
        main()
