"""Options for the fast path that were measured and did not make ``d2l.FAST`` (issue 30).

Not a test: run it on one NVIDIA GPU (about 6 minutes on an H100). It measures, for
ResNet-18 (``conv_bias=False``) on Fashion-MNIST as ``d2l.FAST`` trains it:

1. ``variants``: FAST with one field changed (batch size, rate, warm-up, epochs, eager steps
   before the capture), 3 seeds each in one process, the test accuracy after every epoch and
   with flip evaluation (each test image and its mirror image, logits added) after the last;
2. ``eager``: FAST in fresh processes, marks from each process's start (as ``d2l.cold_start``);
3. ``aot``: the model's training forward compiled once by ``torch.compile(...).aot_compile``,
   saved to a file, then loaded in fresh processes with empty compiler caches, which train
   FAST's step (CUDA graph, fused SGD) through it; the compiling process's cost beside;
4. ``mega``: ``torch.compile`` with the compiler's caches saved by
   ``torch.compiler.save_cache_artifacts`` after a first process and loaded by
   ``load_cache_artifacts`` in fresh processes with empty caches.

    python bench/bench_fast_options.py [--out bench/results] [--repeats 3]

Writes ``<out>/<device>-x1-<date>-fast-options.json`` (every process's marks and history) and
prints a summary. Temporary files (compiled artifacts, caches) go to one folder, removed after.
"""
import argparse
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


def since_start():
    """Seconds since the process was started (``$T0``, set by the parent)."""
    return time.time() - float(os.environ['T0'])


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


def child_variants(repeats):
    import torch
    from d2lzh import torch as d2l
    dev = d2l.try_gpu()
    for name, change in VARIANTS:
        recipe = dataclasses.replace(d2l.FAST, target_accuracy=None, eval_from=1, **change)
        train_iter, test_iter = d2l.load_data_fashion_mnist(recipe.batch_size, device=dev)
        for seed in range(repeats):
            torch.manual_seed(seed)
            net = d2l.resnet18(10, conv_bias=False)
            h = d2l.train_fast(net, train_iter, test_iter, dev, recipe, verbose=False)
            yield {'name': name, 'seed': seed, 'test_acc': h['test_acc'],
                   'flip_acc': flip_accuracy(net, test_iter, dev), 'images_per_s':
                   h['images_per_s'], 'train_s': sum(h['epoch_times'])}


def forward(net, X):
    """The compiled function: the model's forward in bf16, as FAST's step runs it."""
    import torch
    with torch.autocast('cuda', torch.bfloat16):
        return net(X)


def child_aot_compile(path):
    import torch
    from d2lzh import torch as d2l
    torch._dynamo.config.enable_aot_compile = True
    dev = d2l.try_gpu()
    X = next(iter(d2l.load_data_fashion_mnist(512, device=dev)[0]))[0]
    X = X.to(dev, memory_format=torch.channels_last)
    net = d2l.resnet18(10, conv_bias=False).to(dev, memory_format=torch.channels_last)
    start = time.time()
    fn = torch.compile(forward, fullgraph=True).aot_compile(((net, X), {}))
    compile_s = time.time() - start
    fn.save_compiled_function(path)
    yield {'compile_s': compile_s, 'bytes': os.path.getsize(path), 'end': since_start()}


def use_loaded(d2l, fn):
    """Make train_fast's step call ``fn`` for the training forward (evaluation stays eager)."""
    import torch
    from d2lzh.torch import recipe as recipe_module

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

    init = recipe_module.TrainStep.__init__

    def patched(self, net, recipe, device):
        init(self, net, recipe, device)
        self.model = Loaded(net)
    recipe_module.TrainStep.__init__ = patched


def child_run(mode, path, seed):
    marks = {}
    import torch
    marks['import torch'] = since_start()
    from d2lzh import torch as d2l
    dev = d2l.try_gpu()
    torch.empty(1, device=dev)
    d2l.synchronize(dev)
    marks['cuda'] = since_start()
    recipe = d2l.FAST
    if mode == 'aot':
        torch._dynamo.config.enable_aot_compile = True
        with open(path, 'rb') as f:
            use_loaded(d2l, torch.compiler.load_compiled_function(f))
        marks['load'] = since_start()
    elif mode == 'mega':
        recipe = dataclasses.replace(recipe, compile=True)
        if os.path.exists(path):
            torch.compiler.load_cache_artifacts(Path(path).read_bytes())
            marks['load'] = since_start()
    train_iter, test_iter = d2l.load_data_fashion_mnist(recipe.batch_size, device=dev)
    d2l.synchronize(dev)
    marks['data'] = since_start()
    torch.manual_seed(seed)
    net = d2l.resnet18(10, conv_bias=False)
    marks['train'] = since_start()
    h = d2l.train_fast(net, train_iter, test_iter, dev, recipe, verbose=False)
    marks['end'] = since_start()
    if mode == 'mega' and not os.path.exists(path):
        Path(path).write_bytes(torch.compiler.save_cache_artifacts()[0])
    reached = h['reached'] and marks['train'] + h['reached']['seconds']
    yield {'mode': mode, 'marks': marks, 'reached_s': reached, 'history': h}


def spawn(tmp, *args, caches=None):
    """Run this file as a fresh process (``caches``: its own empty compiler caches in
    ``tmp``); returns the dicts it printed. RuntimeError with its last lines if it failed."""
    env = dict(os.environ, T0=repr(time.time()),
               PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get('PYTHONPATH', '')]))
    if caches:
        env.update(TORCHINDUCTOR_CACHE_DIR=f'{tmp}/{caches}-inductor',
                   TRITON_CACHE_DIR=f'{tmp}/{caches}-triton')
    proc = subprocess.run([sys.executable, __file__, *map(str, args)], env=env,
                          capture_output=True, text=True, timeout=600)
    rows = [json.loads(line[4:]) for line in proc.stdout.splitlines() if line[:4] == 'ROW ']
    if proc.returncode != 0:
        tail = '\n'.join((proc.stdout + proc.stderr).strip().splitlines()[-12:])
        raise RuntimeError(f'{args} ended with exit code {proc.returncode}:\n{tail}')
    return rows


def tried(*args, **kwargs):
    """spawn's rows, or {'error': its message} (an option that fails is a result too)."""
    try:
        return spawn(*args, **kwargs)
    except (RuntimeError, subprocess.TimeoutExpired) as err:
        print(err, file=sys.stderr)
        return [{'error': str(err)}]


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
        load = mean(r['marks']['load'] - r['marks']['cuda'] for r in runs if 'load' in r['marks'])
        print(f'{mode:6s} to 0.92: {[r["reached_s"] and round(r["reached_s"], 2) for r in runs]} s'
              f' from the start; import torch {mean(r["marks"]["import torch"] for r in runs):.2f}'
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
        result['variants'] = spawn(tmp, 'variants', args.repeats)
        result['eager'] = [spawn(tmp, 'run', 'eager', '-', i)[0] for i in range(args.repeats)]
        result['aot_compile'] = tried(tmp, 'aot-compile', f'{tmp}/forward.pt2', caches='c')[0]
        result['aot'] = [tried(tmp, 'run', 'aot', f'{tmp}/forward.pt2', i, caches=f'a{i}')[0]
                         for i in range(args.repeats)]
        result['mega_first'] = tried(tmp, 'run', 'mega', f'{tmp}/mega.bin', 0, caches='m')[0]
        result['mega'] = [tried(tmp, 'run', 'mega', f'{tmp}/mega.bin', i, caches=f'm{i}')[0]
                          for i in range(args.repeats)]
    day = result['date'][:10]
    path = args.out / f'{device.replace(" ", "-")}-x1-{day}-fast-options.json'
    args.out.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=1) + '\n')
    summary(result)
    print('wrote', path)


if __name__ == '__main__':
    if len(sys.argv) > 1 and sys.argv[1] in ('variants', 'aot-compile', 'run'):
        sys.path.pop(0)  # bench/, not a package
        what, rest = sys.argv[1], sys.argv[2:]
        rows = {'variants': lambda: child_variants(int(rest[0])),
                'aot-compile': lambda: child_aot_compile(rest[0]),
                'run': lambda: child_run(rest[0], rest[1], int(rest[2]))}[what]()
        for row in rows:
            print('ROW ' + json.dumps(row), flush=True)
    else:
        main()
