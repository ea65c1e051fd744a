"""Measure how two DistributedDataParallel options change the images/s of
``d2l.run_ddp`` on 1 and 2 GPUs, in one run, and write the figures as JSON.

Not a test. It answers one question left by ``bench_torch.py``: is DDP's
``gradient_as_bucket_view`` (the gradients live in the all-reduce buckets)
faster or slower than the default copy into the buckets, with and without
channels_last (whose gradient strides do not match the buckets')? Every run
uses bf16 autocast and the SGD recipe of ``bench_torch.py``.

    python bench/bench_ddp_options.py [--out bench/results] [--epochs 3]

Writes ``<out>/<device>-x<GPUs>-<date>-ddp-options.json``.
"""
import argparse
import datetime
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / 'bench'))

import torch  # noqa: E402

from bench_torch import write_result  # noqa: E402
from d2lzh import torch as d2l  # noqa: E402

RECIPE = {'momentum': 0.9, 'weight_decay': 5e-4, 'lr_schedule': 'cosine'}
CONFIGS = [  # (channels_last, gradient_as_bucket_view)
    (True, False), (True, True), (False, False), (False, True)]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--out', type=Path, default=ROOT / 'bench' / 'results')
    parser.add_argument('--epochs', type=int, default=3, help='epochs per run (best is kept)')
    parser.add_argument('--timeout', type=float, default=120, help='seconds per run')
    args = parser.parse_args()
    n_gpu = d2l.num_gpus()
    if n_gpu == 0:
        sys.exit('bench_ddp_options.py needs at least one NVIDIA GPU')
    result = {
        'date': datetime.datetime.now(datetime.timezone.utc).isoformat(timespec='seconds'),
        'device': d2l.gpu_name(0), 'num_gpus': n_gpu, 'torch': torch.__version__,
        'cuda': torch.version.cuda, 'batch_size_per_gpu': 256, 'lr': 0.1, 'amp': True,
        'recipe': RECIPE, 'epochs': args.epochs, 'runs': []}
    for channels_last, bucket_view in CONFIGS:
        for world in sorted({1, min(2, n_gpu)}):
            run = {'world_size': world, 'channels_last': channels_last,
                   'gradient_as_bucket_view': bucket_view}
            try:
                recipe = d2l.Recipe(epochs=args.epochs, batch_size=256, lr=0.1, amp='auto',
                                    channels_last=channels_last, **RECIPE)
                r = d2l.run_ddp(world, recipe, max_examples='all',
                                gradient_as_bucket_view=bucket_view, timeout=args.timeout)
                run.update(images_per_s=r['images_per_s'], epoch_times_s=r['epoch_times'],
                           test_acc=r['test_acc'])
            except (RuntimeError, TimeoutError) as err:
                run['error'] = str(err)
            result['runs'].append(run)
            print(json.dumps(run), flush=True)
            # after every run: a cut-off run keeps what it measured
            path = write_result(result, args.out, n_gpu, '-ddp-options')
    print('written to', path.name)


if __name__ == '__main__':
    main()
