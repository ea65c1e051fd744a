"""Where the GPU time of one training step of ``d2l.FAST`` goes (issue 11).

Not a test: run it on a machine with an NVIDIA GPU. Runs the recipe's step (d2lzh
ResNet-18, batch 512, bf16 autocast, channels_last, fused SGD with Nesterov momentum,
label smoothing) through ``d2l.TrainStep``, the very step ``d2l.train_fast`` runs for
every minibatch: its first call makes the eager steps and records the CUDA graph, each
later one copies the batch into the graph's inputs and replays it. It times 60 steps,
then profiles 5 with ``torch.profiler`` and sorts every kernel into a category:

* ``convolution``: cuDNN's convolution kernels (forward, data and weight gradients)
  and their layout conversions;
* ``conv_bias_grad`` / ``conv_bias_add``: the convolutions' bias terms, which PyTorch
  computes outside cuDNN (a reduction over batch, height and width in the backward
  pass, a broadcast add in the forward pass; one kernel per convolution, 20 per step);
* ``batch_norm``: batch normalization, forward and backward;
* ``other``: ReLU, residual additions, weight casts for autocast, the SGD update, loss.

    python bench/profile_step.py [--out bench/results]

Writes ``<out>/<device>-x1-<date>-recipe-step-profile.json`` (milliseconds per step for
each category and for each kernel name) and prints the categories.
"""
import argparse
import dataclasses
import datetime
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
from torch.profiler import ProfilerActivity, profile  # noqa: E402

from d2lzh import torch as d2l  # noqa: E402

CONV_NAMES = ('xmma', 'cutlass', 'convolve', 'cask_plugin', 'nchwToNhwc', 'nhwcToNchw',
              'ImplicitGemm')


def category(name, calls_per_step, n_conv):
    """The category of kernel ``name`` (see the module docstring)."""
    if calls_per_step == n_conv and name.startswith('void at::native::reduce_kernel'):
        return 'conv_bias_grad'
    if (calls_per_step == n_conv and name.startswith('void at::native::elementwise_kernel')
            and '_add' in name):
        return 'conv_bias_add'
    if 'batch_norm' in name:
        return 'batch_norm'
    if any(key in name for key in CONV_NAMES):
        return 'convolution'
    return 'other'


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--out', type=Path, default=ROOT / 'bench' / 'results')
    parser.add_argument('--batch-size', type=int, default=d2l.FAST.batch_size)
    parser.add_argument('--no-conv-bias', dest='conv_bias', action='store_false',
                        help='d2l.resnet18(10, conv_bias=False): no bias before a batch norm')
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit('profile_step.py needs an NVIDIA GPU (it records a CUDA graph)')
    dev = torch.device('cuda')
    torch.backends.cudnn.benchmark = False
    torch.manual_seed(0)
    recipe = dataclasses.replace(d2l.FAST, batch_size=args.batch_size)
    fmt = recipe.memory_format
    net = d2l.resnet18(10, conv_bias=args.conv_bias).to(dev, memory_format=fmt)
    n_conv = sum(isinstance(m, torch.nn.Conv2d) and m.bias is not None for m in net.modules())
    step = d2l.TrainStep(net, recipe, dev)
    step.set_lr(recipe.lr / 2)  # a rate in the middle of the schedule
    bs = args.batch_size
    X = torch.rand(bs, 1, 28, 28, device=dev).contiguous(memory_format=fmt)
    y = torch.randint(0, 10, (bs,), device=dev)
    for _ in range(6):  # the first call: eager steps and the capture
        step(X, y)
    if not step.cuda_graph:
        raise SystemExit('the step was not recorded as a CUDA graph (see the warning above)')
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(60):
        step(X, y)
    torch.cuda.synchronize()
    step_ms = (time.perf_counter() - start) / 60 * 1e3
    reps = 5
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            step(X, y)
        torch.cuda.synchronize()
    kernels, cats = {}, {}
    for ev in prof.key_averages():
        t = getattr(ev, 'self_device_time_total', None)
        if t is None:
            t = ev.self_cuda_time_total
        if t <= 0:
            continue
        calls = ev.count // reps
        ms = t / reps / 1e3
        kernels[ev.key] = {'ms_per_step': ms, 'calls_per_step': calls}
        cat = category(ev.key, calls, n_conv)
        kernels[ev.key]['category'] = cat
        cats[cat] = cats.get(cat, 0.0) + ms
    total = sum(cats.values())
    result = {
        'date': datetime.datetime.now(datetime.timezone.utc).isoformat(timespec='seconds'),
        'device': d2l.gpu_name(0), 'torch': torch.__version__, 'batch_size': bs,
        'conv_bias': args.conv_bias, 'convolutions_with_bias': n_conv, 'step_ms_timed': step_ms,
        'images_per_s_timed': bs / step_ms * 1e3, 'kernel_ms_per_step': total,
        'categories_ms_per_step': dict(sorted(cats.items(), key=lambda kv: -kv[1])),
        'kernels': dict(sorted(kernels.items(), key=lambda kv: -kv[1]['ms_per_step'])),
    }
    print(f"{result['device']}, batch {bs}: {step_ms:.2f} ms per step "
          f"({result['images_per_s_timed']:,.0f} images/s); kernels {total:.2f} ms:")
    for cat, ms in result['categories_ms_per_step'].items():
        print(f'  {cat:16s} {ms:6.2f} ms  {ms / total:6.1%}')
    args.out.mkdir(parents=True, exist_ok=True)
    name = (f"{result['device'].replace(' ', '-')}-x1-{result['date'][:10]}"
            f"-recipe-step-profile{'' if args.conv_bias else '-no-conv-bias'}.json")
    (args.out / name).write_text(json.dumps(result, indent=1) + '\n')
    if os.environ.get('OUT'):
        Path(os.environ['OUT'], name).write_text(json.dumps(result, indent=1) + '\n')
    for kernel, k in list(result['kernels'].items())[:15]:
        print(f"  {k['ms_per_step']:6.3f} ms {k['calls_per_step']:3d}x {k['category']:15s} "
              f'{kernel[:110]}')
    print('written to', name)


if __name__ == '__main__':
    main()
