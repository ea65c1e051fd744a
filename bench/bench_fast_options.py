"""Options for the fast path that were measured and did not make ``d2l.FAST`` (issue 30).

Not a test: run it on one NVIDIA GPU (about 6 minutes on an H100). It measures, for
ResNet-18 (``conv_bias=False``) on Fashion-MNIST as ``d2l.FAST`` trains it:

1. ``variants``: FAST with one field changed (batch size, rate, warm-up, epochs, eager steps
   before the capture), 3 seeds each in one process, the test accuracy after every epoch and
   with flip evaluation (each test image and its mirror image, logits added) after the last;
2. ``eager``: FAST in fresh processes (``d2l.cold_start``, the seconds of each stage);
3. ``aot``: the model's training forward compiled once by ``torch.compile(...).aot_compile``,
   saved to a file, then loaded in fresh processes with empty compiler caches
   (``d2l.cold_start`` with the setup hook :func:`load_aot`), which train FAST's step (CUDA
   graph, fused SGD) through it; the compiling cost beside;
4. ``mega``: ``torch.compile`` with the compiler's caches saved by
   ``torch.compiler.save_cache_artifacts`` after a first process and loaded by
   ``load_cache_artifacts`` in fresh processes with empty caches (setup hook :func:`load_mega`).

    python bench/bench_fast_options.py [--out bench/results] [--repeats 3]

Writes ``<out>/<device>-x1-<date>-fast-options.json`` (every process's items and history) and
prints a summary. Temporary files (compiled artifacts, caches) go to one folder, removed after.
"""
import argparse
import atexit
import dataclasses
import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VARIANTS = [('fast', {}), ('capture_after=1', {'capture_after': 1}),
            ('epochs=1', {'epochs': 1}), ('epochs=1, lr=0.2', {'epochs': 1, 'lr': 0.2}),
            ('lr=0.15', {'lr': 0.15}), ('lr_warmup=0.1', {'lr_warmup': 0.1}),
            ('batch 768, lr=0.15', {'batch_size': 768, 'lr': 0.15}),
            ('batch 1024, lr=0.2', {'batch_size': 1024, 'lr': 0.2})]


def flip_accuracy(net, test_iter, device):
    """Test accuracy of ``net`` with each image's logits added to its mirror image's."""
    import torch
    net.eval()
    correct, n = 0, 0
    with torch.no_grad(), torch.autocast('cuda', torch.bfloat16):
        for X, y in test_iter:
            X = X.to(device, memory_format=torch.channels_last)
            correct += int(((net(X).float() + net(X.flip(3)).float()).argmax(1) == y).sum())
            n += len(y)
    net.train()
    return correct / n


def variants(repeats):
    """FAST with one field changed (VARIANTS), ``repeats`` seeds each, in this process."""
    import torch
    from d2lzh import torch as d2l
    dev, rows = d2l.try_gpu(), []
    for name, change in VARIANTS:
        recipe = dataclasses.replace(d2l.FAST, target_accuracy=None, eval_from=1, **change)
        train_iter, test_iter = d2l.load_data_fashion_mnist(recipe.batch_size, device=dev)
        for seed in range(repeats):
            torch.manual_seed(seed)
            net = d2l.resnet18(10, conv_bias=False)
            h = d2l.train_fast(net, train_iter, test_iter, dev, recipe, verbose=False)
            rows.append({'name': name, 'seed': seed, 'test_acc': h['test_acc'],
                         'flip_acc': flip_accuracy(net, test_iter, dev), 'images_per_s':
                         h['images_per_s'], 'train_s': sum(h['epoch_times'])})
    return rows


def forward(net, X):
    """The compiled function: the model's forward in bf16, as FAST's step runs it."""
    import torch
    with torch.autocast('cuda', torch.bfloat16):
        return net(X)


def aot_compile(path):
    """Compile the training forward once by ``aot_compile`` (in this process), saved to
    ``path``; returns the seconds and the file's size."""
    import torch
    from d2lzh import torch as d2l

    # the forward under the module name that load_aot's fresh process imports (not __main__)
    from bench.bench_fast_options import forward as traced
    torch._dynamo.config.enable_aot_compile = True
    dev = d2l.try_gpu()
    X = next(iter(d2l.load_data_fashion_mnist(512, device=dev)[0]))[0]
    X = X.to(dev, memory_format=torch.channels_last)
    net = d2l.resnet18(10, conv_bias=False).to(dev, memory_format=torch.channels_last)
    start = time.time()
    fn = torch.compile(traced, fullgraph=True).aot_compile(((net, X), {}))
    compile_s = time.time() - start
    fn.save_compiled_function(path)
    return {'compile_s': compile_s, 'bytes': os.path.getsize(path)}


def load_aot(recipe, path):
    """``d2l.cold_start``'s setup hook: train through the forward compiled into ``path``
    (evaluation stays eager); returns ``(recipe, wrap)``."""
    import torch
    torch._dynamo.config.enable_aot_compile = True
    with open(path, 'rb') as f:
        fn = torch.compiler.load_compiled_function(f)

    class Loaded(torch.nn.Module):
        def __init__(self, net):
            super().__init__()
            self.net = net

        def forward(self, X):
            if not self.training:
                return self.net(X)
            # as when it was compiled: no autocast around it (it has its own)
            with torch.autocast('cuda', torch.float16, enabled=False, cache_enabled=True):
                return fn(self.net, X)
    return recipe, Loaded


def load_mega(recipe, path):
    """``d2l.cold_start``'s setup hook: ``torch.compile`` with the caches of ``path``
    loaded, or (the first process) saved there as the process exits."""
    import torch
    if os.path.exists(path):
        torch.compiler.load_cache_artifacts(Path(path).read_bytes())
    else:
        atexit.register(lambda: Path(path).write_bytes(
            torch.compiler.save_cache_artifacts()[0]))
    return dataclasses.replace(recipe, compile=True), None


def cold(mode, path, seed, tmp, caches=None):
    """One fresh process of ``d2l.cold_start`` (FAST, ``conv_bias=False``) with the setup
    hook of ``mode`` ('eager': none) and, with ``caches``, empty compiler caches of its own
    in ``tmp``; its result and ``mode``, or {'error': its message}: an option that fails
    is a result too."""
    from d2lzh import torch as d2l
    env = caches and {'TORCHINDUCTOR_CACHE_DIR': f'{tmp}/{caches}-inductor',
                      'TRITON_CACHE_DIR': f'{tmp}/{caches}-triton'}
    setup = None if mode == 'eager' else (f'bench.bench_fast_options:load_{mode}', path)
    try:
        return {'mode': mode, **d2l.cold_start({'seed': seed}, 600, env, setup)}
    except (RuntimeError, subprocess.TimeoutExpired) as err:
        print(err, file=sys.stderr)
        return {'error': str(err)}


def mean(values):
    values = [v for v in values if v is not None]
    return statistics.mean(values) if values else None


def summary(result):
    for name in dict(VARIANTS):
        rows = [r for r in result['variants'] if r['name'] == name]
        print(f'{name:20s} test acc {mean(r["test_acc"][-1] for r in rows):.4f}, with flips '
              f'{mean(r["flip_acc"] for r in rows):.4f}, {mean(r["images_per_s"] for r in rows):.0f}'
              f' images/s')
    for mode in ('eager', 'aot', 'mega'):
        runs = [r for r in result[mode] if 'error' not in r]
        if not runs:
            print(f'{mode:6s} failed: {result[mode][0]["error"].splitlines()[-1]}')
            continue
        load = mean(r['items'].get('setup') for r in runs)
        imported = mean(r['items']['python_start'] + r['items']['import_torch'] for r in runs)
        print(f'{mode:6s} to 0.92: {[r["reached_s"] and round(r["reached_s"], 2) for r in runs]} s'
              f' from the start; import torch {imported:.2f}'
              f' s; loading {"-" if load is None else f"{load:.2f} s"}; startup '
              f'{mean(r["history"]["startup_s"] for r in runs):.2f} s; '
              f'{mean(r["history"]["images_per_s"] for r in runs):.0f} images/s')


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--out', type=Path, default=ROOT / 'bench' / 'results')
    parser.add_argument('--repeats', type=int, default=3, help='seeds, and fresh processes')
    args = parser.parse_args()
    import torch
    device = torch.cuda.get_device_name()
    result = {'date': datetime.datetime.now(datetime.timezone.utc).isoformat(timespec='seconds'),
              'device': device, 'torch': torch.__version__, 'cuda': torch.version.cuda}
    with tempfile.TemporaryDirectory(prefix='fast-options-') as tmp:
        result['variants'] = variants(args.repeats)
        result['eager'] = [cold('eager', None, i, tmp) for i in range(args.repeats)]
        os.environ.update(TORCHINDUCTOR_CACHE_DIR=f'{tmp}/c-inductor',  # its own caches
                          TRITON_CACHE_DIR=f'{tmp}/c-triton')
        try:
            result['aot_compile'] = aot_compile(f'{tmp}/forward.pt2')
        except Exception as err:  # noqa: BLE001 (an option that fails is a result too)
            result['aot_compile'] = {'error': f'{type(err).__name__}: {err}'}
        result['aot'] = [cold('aot', f'{tmp}/forward.pt2', i, tmp, f'a{i}')
                         for i in range(args.repeats)]
        mega = f'{tmp}/mega.bin'
        result['mega_first'] = cold('mega', mega, 0, tmp, 'm')
        if not os.path.exists(mega):  # the first process saves the caches as it exits
            result['mega_first'] = {'error': f'{mega} not written', **result['mega_first']}
        result['mega'] = [cold('mega', mega, i, tmp, f'm{i}') for i in range(args.repeats)]
    day = result['date'][:10]
    path = args.out / f'{device.replace(" ", "-")}-x1-{day}-fast-options.json'
    args.out.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=1) + '\n')
    summary(result)
    print('wrote', path)


if __name__ == '__main__':
    sys.path.insert(0, str(ROOT))
    main()
