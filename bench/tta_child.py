"""One fresh process of ``bench_torch.py time_to_accuracy`` (not run by hand).

Trains the d2lzh ResNet-18 on the real Fashion-MNIST with ``d2l.train_fast`` and one
``d2l.Recipe`` and prints one JSON line: wall seconds from the process start (``$TTA_T0``,
the parent's ``time.time()`` just before it started this process) to each stage, and to the
first test accuracy >= the target on the full test set. Argument: the configuration as JSON
(see ``TTA_CONFIGS`` in bench_torch.py: a few settings and the recipe's fields).
"""
import json
import os
import sys
import threading
import time

T0 = float(os.environ.get('TTA_T0', time.time()))
cfg = json.loads(sys.argv[1])
marks = {'python_start': time.time() - T0}

import torch  # noqa: E402

marks['import_torch'] = time.time() - T0
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..'))
from d2lzh import torch as d2l  # noqa: E402
from d2lzh import data as d2l_data  # noqa: E402

marks['imports'] = time.time() - T0
device = d2l.try_gpu()
on_gpu = device.type == 'cuda'


def cuda_init():
    if on_gpu:
        torch.empty(1, device=device)
        torch.cuda.synchronize(device)


if cfg.get('overlap_init'):  # start CUDA while the files are read and decompressed
    thread = threading.Thread(target=cuda_init)
    thread.start()
    arrays = d2l_data.load_fashion_mnist(max_examples=cfg.get('max_examples', 'all'),
                                         progress=False)
    thread.join()
    marks['cuda_init'] = time.time() - T0
else:
    cuda_init()
    marks['cuda_init'] = time.time() - T0
    arrays = d2l_data.load_fashion_mnist(max_examples=cfg.get('max_examples', 'all'),
                                         progress=False)
recipe = d2l.Recipe(**cfg['recipe'])
bs = recipe.batch_size
data_dev = device if cfg.get('gpu_data', True) and on_gpu else None
train_iter = d2l.FashionMNISTIter(arrays[0], arrays[1], bs, True, device=data_dev)
test_iter = d2l.FashionMNISTIter(arrays[2], arrays[3], cfg.get('eval_batch_size', bs), False,
                                 device=data_dev)
d2l.synchronize(device)
marks['data'] = time.time() - T0
torch.backends.cudnn.benchmark = bool(cfg.get('cudnn_benchmark', False))
torch.manual_seed(cfg.get('seed', 0))
net = d2l.resnet18(10, conv_bias=cfg.get('conv_bias', True))
if cfg.get('import_dynamo'):  # as building a torch.optim optimizer does
    import torch._dynamo  # noqa: F401
t_train = time.time()
h = d2l.train_fast(net, train_iter, test_iter, device, recipe, verbose=False)
t_end = time.time()
marks['end'] = t_end - T0
target = cfg.get('target', 0.92)
reached = None
if recipe.target_accuracy is not None:  # train_fast stops there and says when
    if h['reached'] is not None:
        reached = t_train - T0 + h['reached']['seconds']
else:  # no target given: add up the start-up, epochs and evaluations up to the first hit
    elapsed = t_train - T0 + h['startup_s']
    evals = iter(h['eval_times'])
    for e, acc in enumerate(h['test_acc']):
        elapsed += h['epoch_times'][e] + (next(evals) if acc is not None else 0.0)
        if acc is not None and acc >= target:
            reached = elapsed
            break
epochs_run = len(h['epoch_times'])
out = {
    'marks': marks, 'reached_s': reached, 'total_s': t_end - T0,
    'test_acc': h['test_acc'], 'epochs_run': epochs_run,
    'items': {
        'python_start': marks['python_start'],
        'import_torch': marks['import_torch'] - marks['python_start'],
        'import_d2lzh': marks['imports'] - marks['import_torch'],
        'cuda_init': marks['cuda_init'] - marks['imports'],
        'data': marks['data'] - marks['cuda_init'],
        'startup': h['startup_s'],
        'epochs': sum(h['epoch_times']),
        'evals': sum(h['eval_times']),
    },
    'epoch_times': h['epoch_times'], 'images_per_s': h['images_per_s'],
    'amp_dtype': h['amp'],  # 'bf16', 'fp16' or 'off'
    'device': d2l.gpu_name(0) if on_gpu else 'cpu',
    'dynamo_imported': 'torch._dynamo' in sys.modules,
}

out['items']['other'] = out['total_s'] - sum(out['items'].values())
print('TTA_RESULT ' + json.dumps(out), flush=True)
