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
"""
import argparse
import datetime
import json
import os
import platform
import re
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from d2lzh import torch as d2l  # noqa: E402

STEPS = [  # name, what is added, options for d2l.train / the loader
    ('book', 'book-style loop: host batches, fp32', {}),
    ('pinned', '+ pinned memory, non_blocking copies', {'pin_memory': True}),
    ('gpu_data', '+ whole data set resident on the GPU', {'gpu_data': True}),
    ('cudnn_benchmark', '+ cudnn.benchmark', {'gpu_data': True, 'cudnn_benchmark': True}),
    ('bf16', '+ bf16 autocast', {'gpu_data': True, 'cudnn_benchmark': True, 'amp': True}),
    ('channels_last', '+ channels_last', {'gpu_data': True, 'cudnn_benchmark': True,
                                          'amp': True, 'channels_last': True}),
    ('compile', '+ torch.compile', {'gpu_data': True, 'cudnn_benchmark': True, 'amp': True,
                                    'channels_last': True, 'compile_model': True}),
    ('cuda_graph', '+ whole step as a CUDA graph (instead of torch.compile)',
     {'gpu_data': True, 'cudnn_benchmark': True, 'amp': True, 'channels_last': True,
      'cuda_graph': True}),
    ('graph_compile', '+ torch.compile inside the CUDA graph',
     {'gpu_data': True, 'cudnn_benchmark': True, 'amp': True, 'channels_last': True,
      'cuda_graph': True, 'compile_model': True}),
]
# SGD settings of the accuracy run and the DDP runs (speed does not depend on them).
RECIPE = {'momentum': 0.9, 'weight_decay': 5e-4, 'lr_schedule': 'cosine'}
# nn.DataParallel is slow enough to dominate the run: time it on a subset.
DP_EXAMPLES = 15360


def run_step(options, epochs, batch_size, lr, max_examples, device, **recipe):
    """Train a fresh ResNet-18 with ``options``; return d2l.train's history."""
    torch.manual_seed(0)
    torch.backends.cudnn.benchmark = bool(options.get('cudnn_benchmark'))
    on_gpu = device.type == 'cuda'
    train_iter, test_iter = d2l.load_data_fashion_mnist(
        batch_size, max_examples=max_examples,
        device=device if options.get('gpu_data') and on_gpu else None,
        pin_memory=bool(options.get('pin_memory')) and on_gpu)
    if options.get('compile_model'):
        torch._dynamo.reset()
    return d2l.train(d2l.resnet18(10), train_iter, test_iter, epochs, lr, device,
                     amp=options.get('amp', False), channels_last=options.get('channels_last', False),
                     compile_model=options.get('compile_model', False),
                     cuda_graph=options.get('cuda_graph', False), verbose=False, **recipe)


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
    for name, label, options in STEPS:
        if (options and device.type != 'cuda') or name in skip:
            continue
        h = run_step(options, args.epochs, args.batch_size, args.lr, max_examples, device)
        step = {'name': name, 'label': label, 'images_per_s': h['images_per_s'],
                'epoch_times_s': h['epoch_times'], 'test_acc': h['test_acc'][-1]}
        result['steps'].append(step)
        print(f"{name:16s} {h['images_per_s']:9.0f} images/s  epochs {h['epoch_times']}",
              flush=True)
    book = result['steps'][0]['images_per_s']
    best = max(result['steps'], key=lambda s: s['images_per_s'])
    result['speedup_vs_book'] = best['images_per_s'] / book
    best_options = next(o for n, _, o in STEPS if n == best['name'])
    h = run_step(best_options, args.accuracy_epochs, args.batch_size, args.lr, max_examples,
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
            # d2l.run_ddp refuses cuda_graph with several processes (it hung on 2x H200)
            for world in [1] if graph else sorted({1, min(2, n_gpu)}):
                key = f"{world}{'_graph' if graph else ''}"
                try:
                    r = d2l.run_ddp(world, num_epochs=args.epochs + 1,
                                    batch_size=args.batch_size, lr=args.lr,
                                    max_examples=max_examples, cuda_graph=graph,
                                    timeout=args.ddp_timeout, **RECIPE)
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
    args.out.mkdir(parents=True, exist_ok=True)
    slug = re.sub(r'[^A-Za-z0-9]+', '-', result['device']).strip('-')
    path = args.out / f"{slug}-x{n_gpu}-{result['date'][:10]}.json"
    path.write_text(json.dumps(result, indent=2) + '\n')
    print(f"\nspeed-up of the fastest single-GPU step over the book-style loop: "
          f"{result['speedup_vs_book']:.2f}x; written to {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}")
    if os.environ.get('OUT'):
        Path(os.environ['OUT'], path.name).write_text(path.read_text())


if __name__ == '__main__':
    main()
