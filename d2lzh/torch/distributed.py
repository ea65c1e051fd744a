"""DistributedDataParallel under PyTorch's own launcher (book 8.5, and beyond it).

One worker, three ways to start it:

* on one machine, N processes::

      torchrun --standalone --nproc-per-node=N -m d2lzh.torch.distributed --epochs 4

* on several machines (or two "nodes" on one machine, ports on 127.0.0.1),
  the same command on every node, with the same rendezvous endpoint::

      torchrun --nnodes=2 --node-rank=0 --nproc-per-node=N --rdzv-backend=c10d \\
          --rdzv-endpoint=HOST:PORT --rdzv-id=JOB -m d2lzh.torch.distributed ...

* from a notebook: :func:`run_ddp`, a thin layer over
  ``torch.distributed.launcher.api.elastic_launch`` running :func:`ddp_worker`.

The worker reads its rank and the world size from torchrun's environment
(``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``/``MASTER_PORT``,
``TORCHELASTIC_RESTART_COUNT``),
uses NCCL on GPUs (one GPU per local rank) and gloo on the CPU, takes its own
shard of Fashion-MNIST, wraps ResNet-18 (or LeNet) in DistributedDataParallel
and trains it with :func:`d2lzh.torch.train`, the same epoch loop as one
device. With ``--checkpoint FILE`` rank 0 saves the state after every epoch
and a restarted group (``--max-restarts``) resumes from it.

Fault injection for tests and the notebook: ``D2LZH_DDP_FAULT=KIND:RANK:EPOCH``
(KIND ``raise`` or ``kill``) makes that rank raise an exception or SIGKILL
itself after the first step of that epoch, on the first attempt only
(``TORCHELASTIC_RESTART_COUNT=0``).
"""
import argparse
import hashlib
import json
import os
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
import uuid
import warnings
from datetime import timedelta

import numpy as np
import torch
from torch import nn
from torch.distributed.elastic.multiprocessing.errors import record

from .. import checks as _checks
from .. import data as _data
from . import book as _book
from .book import resnet18
from .iterators import FashionMNISTIter
from .training import _capture_stream, _check_options, train

__all__ = ['run_ddp', 'ddp_worker', 'main', 'measure_allreduce', 'ShardIter', 'shard_indices',
           'lenet', 'DEFAULTS']

#: The worker's settings and their defaults (``run_ddp`` keywords, ``main``'s
#: ``--options`` with ``-`` for ``_``).
DEFAULTS = {
    'num_epochs': 4, 'batch_size': 256, 'lr': 0.1, 'max_examples': None,
    'model': 'resnet18', 'amp': True, 'channels_last': True, 'compile_model': False,
    'cuda_graph': False, 'gradient_as_bucket_view': True, 'momentum': 0.0,
    'weight_decay': 0.0, 'lr_schedule': None, 'nesterov': False, 'label_smoothing': 0.0,
    'warmup': 0.0, 'target_accuracy': None, 'eval_from': 1, 'backend': None,
    'timeout': 900.0, 'seed': 0, 'checkpoint': None, 'out': None, 'verbose': False,
}
#: The settings passed through to :func:`d2lzh.torch.train` unchanged.
TRAIN_OPTIONS = ('amp', 'channels_last', 'compile_model', 'momentum', 'weight_decay',
                 'lr_schedule', 'nesterov', 'label_smoothing', 'warmup', 'target_accuracy',
                 'eval_from', 'checkpoint')


# ------------------------------------------------------------------ the data shard

def shard_indices(num_examples, rank, world_size, seed, epoch):
    """Indices of the examples that ``rank`` trains on in ``epoch``.

    Every rank draws the same permutation (seeded with ``seed + epoch``) and
    takes its own contiguous slice of ``num_examples // world_size``: the
    shards are disjoint and need no communication; the remainder is left out.

    Returns:
        torch.Tensor: int64 (num_examples // world_size,), on the CPU.
    """
    g = torch.Generator().manual_seed(seed + epoch)
    per_rank = num_examples // world_size
    return torch.randperm(num_examples, generator=g)[rank * per_rank:(rank + 1) * per_rank]


class ShardIter:
    """One rank's minibatches of Fashion-MNIST, kept on ``device`` as uint8.

    Yields ``(X, y)``: X float32 (batch, 1, 28, 28) in [0, 1], y int64. Every
    rank has the same number of batches per epoch (the last may be smaller,
    equally on every rank). :func:`d2lzh.torch.train` calls
    ``set_epoch(epoch)`` before each pass, which picks the epoch's shard.

    Args:
        images (numpy.ndarray): uint8 (N, 28, 28).
        labels (numpy.ndarray): int (N,).
        batch_size (int): examples per step in this process.
        rank, world_size (int): this process and the number of processes.
        seed (int): seed of the per-epoch permutation.
        device (torch.device): where the data set is kept.
    """

    def __init__(self, images, labels, batch_size, rank, world_size, seed, device):
        self.images = torch.tensor(images, dtype=torch.uint8).unsqueeze(1).to(device)
        self.labels = torch.from_numpy(labels.astype(np.int64)).to(device)
        self.batch_size, self.rank, self.world_size = batch_size, rank, world_size
        self.seed, self.epoch = seed, 0
        self.per_rank = len(self.labels) // world_size
        self.fault = _fault_for(rank)

    def set_epoch(self, epoch):
        """Train on ``epoch``'s shard in the next pass."""
        self.epoch = epoch

    def __len__(self):
        return (self.per_rank + self.batch_size - 1) // self.batch_size

    def __iter__(self):
        idx = shard_indices(len(self.labels), self.rank, self.world_size, self.seed,
                            self.epoch).to(self.images.device)
        for step, i in enumerate(range(0, self.per_rank, self.batch_size)):
            if step == 1 and self.fault is not None and self.fault[1] == self.epoch:
                _inject(self.fault[0], self.rank, self.epoch)
            b = idx[i:i + self.batch_size]
            yield self.images[b].float().div_(255), self.labels[b]


def _fault_for(rank):
    """(kind, epoch) from ``$D2LZH_DDP_FAULT`` for this rank on the first attempt, else None."""
    spec = os.environ.get('D2LZH_DDP_FAULT')
    if not spec or os.environ.get('TORCHELASTIC_RESTART_COUNT', '0') != '0':
        return None
    try:
        kind, fault_rank, epoch = spec.split(':')
        fault_rank, epoch = int(fault_rank), int(epoch)
        if kind not in ('raise', 'kill'):
            raise ValueError(kind)
    except ValueError:
        raise ValueError(f'D2LZH_DDP_FAULT={spec!r} is not valid: use KIND:RANK:EPOCH with '
                         'KIND raise or kill, e.g. kill:1:1') from None
    return (kind, epoch) if fault_rank == rank else None


def _inject(kind, rank, epoch):
    if kind == 'kill':
        os.kill(os.getpid(), signal.SIGKILL)
    raise RuntimeError(f'rank {rank} failed on purpose in epoch {epoch} (D2LZH_DDP_FAULT)')


# ------------------------------------------------------------------ the worker

def lenet(num_classes=10):
    """LeNet (book 5.5) with ReLU and max pooling: a small model without batch
    norm, so that N processes on batches of B match one process on N*B
    exactly (batch norm's statistics are per process). Input float
    (batch, 1, 28, 28) -> logits (batch, num_classes). Beyond the book's API."""
    return nn.Sequential(
        nn.Conv2d(1, 6, kernel_size=5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(6, 16, kernel_size=5), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
        nn.Linear(16 * 5 * 5, 120), nn.ReLU(), nn.Linear(120, 84), nn.ReLU(),
        nn.Linear(84, num_classes))


def _env_int(name):
    value = os.environ.get(name)
    if value is None:
        raise RuntimeError(
            f'${name} is not set: ddp_worker runs under torchrun, e.g. `torchrun --standalone '
            '--nproc-per-node=2 -m d2lzh.torch.distributed`, or through d2l.run_ddp')
    return int(value)


def _loopback_interface():
    """Name of the loopback interface ('lo' on Linux, 'lo0' on macOS) or None."""
    for _, name in socket.if_nameindex():
        if name.startswith('lo'):
            return name
    return None


def _attempt_store(rank, world_size, timeout):
    """The key-value store at ``MASTER_ADDR:MASTER_PORT`` (torchrun's), with
    keys under a prefix of this attempt (``TORCHELASTIC_RESTART_COUNT``).

    ``init_method='env://'`` reuses torchrun's store across restarts without
    a prefix: after a restart, gloo could read a dead process's address and
    fail to connect (seen in 2 of 3 restarts with torch 2.13 on the CPU)."""
    import torch.distributed as dist

    agent_hosts_it = os.environ.get('TORCHELASTIC_USE_AGENT_STORE') == 'True'
    store = dist.TCPStore(os.environ['MASTER_ADDR'], int(os.environ['MASTER_PORT']),
                          world_size, is_master=not agent_hosts_it and rank == 0,
                          timeout=timeout)
    attempt = os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')
    return dist.PrefixStore(f'd2lzh/attempt_{attempt}', store)


def _params_digest(module):
    """SHA-1 of every parameter's bytes: equal digests mean bitwise-equal replicas."""
    h = hashlib.sha1()
    for p in module.parameters():
        h.update(p.detach().float().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()


def _config(config):
    unknown = set(config or {}) - set(DEFAULTS)
    if unknown:
        raise ValueError(f'unknown setting(s) {sorted(unknown)}: the worker knows '
                         f'{sorted(DEFAULTS)}')
    cfg = {**DEFAULTS, **(config or {})}
    _checks.check_positive_int('num_epochs', cfg['num_epochs'])
    _checks.check_positive_int('batch_size', cfg['batch_size'])
    _check_options(cfg['num_epochs'], cfg['lr_schedule'], cfg['momentum'], cfg['nesterov'],
                   cfg['label_smoothing'], cfg['warmup'], cfg['target_accuracy'],
                   cfg['eval_from'])
    if cfg['model'] not in ('resnet18', 'lenet'):
        raise ValueError(f"model={cfg['model']!r} is not valid: use 'resnet18' or 'lenet'")
    if cfg['backend'] not in (None, 'nccl', 'gloo'):
        raise ValueError(f"backend={cfg['backend']!r} is not valid: use None, 'nccl' or 'gloo'")
    return cfg


@record
def ddp_worker(config=None):
    """One process of a DistributedDataParallel job; run it under torchrun.

    Reads ``RANK``, ``LOCAL_RANK`` and ``WORLD_SIZE`` from torchrun's
    environment, joins the process group (NCCL with GPUs, one per local
    rank; gloo on the CPU) through torchrun's store at ``MASTER_ADDR:MASTER_PORT``
    with keys of this attempt (see :func:`_attempt_store`), trains on its shard
    with :func:`d2lzh.torch.train` and leaves the group. A deadline of
    ``config['timeout']`` seconds bounds the whole process (it exits with
    code 124) and every collective. Decorated with torch's ``@record``, so
    an exception's traceback reaches torchrun's error summary.

    Args:
        config (dict or None): settings, see :data:`DEFAULTS`: ``num_epochs``,
            ``batch_size`` (per process), ``lr``, ``max_examples``, ``model``
            ('resnet18' or 'lenet'), ``amp``, ``channels_last``,
            ``compile_model``, ``cuda_graph``, ``momentum``,
            ``weight_decay``, ``lr_schedule``, and the time-to-accuracy
            options ``nesterov``, ``label_smoothing``, ``warmup``,
            ``target_accuracy``, ``eval_from`` (all as
            :func:`d2lzh.torch.train`; rank 0 evaluates, and its decision
            to stop at ``target_accuracy`` ends every rank's training),
            ``gradient_as_bucket_view`` (DDP's option), ``backend``,
            ``timeout`` (s), ``seed``, ``checkpoint`` (file on storage every
            node sees), ``out`` (folder for rank 0's ``result.json``),
            ``verbose``.

    Returns:
        dict or None: on rank 0, the history of :func:`d2lzh.torch.train`
        plus ``world_size``, ``backend``, ``device``, ``restart_count``,
        ``params_digest`` (one SHA-1 per rank), ``images_per_s`` and
        ``examples`` for all processes together; None on other ranks.

    Raises:
        RuntimeError: not started by torchrun (no ``$RANK``), or a failure
            in training.
        ValueError: an unknown or invalid setting, or ``cuda_graph`` with
            NCCL and more than one process (it hung on 2x H200).
    """
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    cfg = _config(config)
    rank, local_rank, world_size = _env_int('RANK'), _env_int('LOCAL_RANK'), \
        _env_int('WORLD_SIZE')
    deadline = threading.Timer(cfg['timeout'], _deadline_passed, (rank, cfg['timeout']))
    deadline.daemon = True
    deadline.start()
    warnings.filterwarnings('ignore', message=r'barrier\(\): using the device')
    warnings.filterwarnings('ignore', message='Grad strides do not match bucket view')
    backend = cfg['backend'] or ('nccl' if torch.cuda.is_available() else 'gloo')
    _refuse_graph_with_several(cfg['cuda_graph'], backend, world_size)
    if os.environ.get('MASTER_ADDR') in ('127.0.0.1', 'localhost') and _loopback_interface():
        # one machine: keep gloo's and NCCL's own sockets on the loopback interface too
        os.environ.setdefault('GLOO_SOCKET_IFNAME', _loopback_interface())
        os.environ.setdefault('NCCL_SOCKET_IFNAME', _loopback_interface())
    if backend == 'nccl':
        if local_rank >= _book.num_gpus():
            raise RuntimeError(f'local rank {local_rank} has no GPU: this node has '
                               f'{_book.num_gpus()}; start at most that many processes per '
                               'node (--nproc-per-node)')
        device = torch.device(f'cuda:{local_rank}')
        torch.cuda.set_device(device)
        if cfg['cuda_graph']:  # NCCL calls inside a CUDA graph need this off
            os.environ['TORCH_NCCL_ASYNC_ERROR_HANDLING'] = '0'
    else:
        device = torch.device('cpu')
        local = int(os.environ.get('LOCAL_WORLD_SIZE', world_size))
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // local))
    timeout = timedelta(seconds=cfg['timeout'])
    dist.init_process_group(backend, store=_attempt_store(rank, world_size, timeout),
                            rank=rank, world_size=world_size, timeout=timeout)
    try:
        torch.manual_seed(cfg['seed'])  # the same initial weights on every rank
        n = _data.parse_max_examples(cfg['max_examples']) if cfg['max_examples'] is not None \
            else _data.max_examples_from_env()
        train_x, train_y, test_x, test_y = _data.load_fashion_mnist(
            max_examples=n or 'all', progress=False)
        train_iter = ShardIter(train_x, train_y, cfg['batch_size'], rank, world_size,
                               cfg['seed'], device)
        test_iter = FashionMNISTIter(test_x, test_y, 512, False, device=device) \
            if rank == 0 else None
        fmt = torch.channels_last if cfg['channels_last'] else torch.contiguous_format
        net = (resnet18(10) if cfg['model'] == 'resnet18' else lenet()).to(
            device, memory_format=fmt)
        use_graph = bool(cfg['cuda_graph']) and device.type == 'cuda'
        # With a graph, DDP must be built on the stream that later records it
        # (torch.cuda.stream(None) changes nothing).
        stream = _capture_stream(device) if use_graph else None
        with torch.cuda.stream(stream):
            model = DistributedDataParallel(
                net, device_ids=[local_rank] if device.type == 'cuda' else None,
                gradient_as_bucket_view=bool(cfg['gradient_as_bucket_view']))
        if stream is not None:
            torch.cuda.current_stream(device).wait_stream(stream)
        history = train(model, train_iter, test_iter, cfg['num_epochs'], cfg['lr'], device,
                        cuda_graph=use_graph, verbose=bool(cfg['verbose']) and rank == 0,
                        **{name: cfg[name] for name in TRAIN_OPTIONS})
        digests = [None] * world_size
        dist.all_gather_object(digests, _params_digest(net))
    finally:
        dist.destroy_process_group()
        deadline.cancel()
    if rank != 0:
        return None
    history.update(
        world_size=world_size, backend=backend, cuda_graph=use_graph,
        device=_book.gpu_name(local_rank) if device.type == 'cuda' else 'cpu',
        restart_count=int(os.environ.get('TORCHELASTIC_RESTART_COUNT', 0)),
        params_digest=digests, examples=history['examples'] * world_size,
        images_per_s=history['images_per_s'] * world_size)
    if cfg['out']:
        os.makedirs(cfg['out'], exist_ok=True)
        with open(os.path.join(cfg['out'], 'result.json'), 'w') as f:
            json.dump(history, f)
    return history


#: Set to 1 to record the DDP step as a CUDA graph in several NCCL processes anyway, to
#: investigate the hang (docs/gpu-runs.md); the worker's --timeout still ends a hung job.
GRAPH_EXPERIMENT_ENV = 'D2LZH_DDP_GRAPH_EXPERIMENT'


def _refuse_graph_with_several(cuda_graph, backend, world_size):
    if cuda_graph and backend == 'nccl' and world_size > 1:
        if os.environ.get(GRAPH_EXPERIMENT_ENV) == '1':
            warnings.warn(f'{GRAPH_EXPERIMENT_ENV}=1: recording the DDP step with '
                          f'world_size={world_size}; this hung before, and only the '
                          'timeout ends it if it hangs again', RuntimeWarning, stacklevel=2)
            return
        raise ValueError(
            f'cuda_graph=True with world_size={world_size}: capturing the DDP step in more '
            'than one process never finished on 2x H200 with PyTorch 2.11 (it hung until '
            'the timeout; see bench/README.md), so it is refused rather than left to hang. '
            'Use cuda_graph=False with several processes, or world_size=1.')


def _deadline_passed(rank, seconds):
    print(f'rank {rank}: the deadline of {seconds:g} s passed; exiting with code 124',
          file=sys.stderr, flush=True)
    os._exit(124)


def _parser():
    p = argparse.ArgumentParser(
        prog='torchrun ... -m d2lzh.torch.distributed',
        description='Train ResNet-18 (or LeNet) on Fashion-MNIST with DistributedDataParallel; '
                    'one process of a torchrun job.')
    p.add_argument('--epochs', type=int, default=DEFAULTS['num_epochs'], dest='num_epochs')
    p.add_argument('--batch-size', type=int, default=DEFAULTS['batch_size'],
                   help='examples per step in each process')
    p.add_argument('--lr', type=float, default=DEFAULTS['lr'])
    p.add_argument('--max-examples', default=None,
                   help="first N training and test images, or 'all' "
                        '(default: $D2LZH_MAX_EXAMPLES, else all)')
    p.add_argument('--model', choices=['resnet18', 'lenet'], default='resnet18')
    p.add_argument('--amp', action=argparse.BooleanOptionalAction, default=True,
                   help='mixed precision on GPUs (bf16, or fp16 + GradScaler before '
                        'compute capability 8.0)')
    p.add_argument('--channels-last', action=argparse.BooleanOptionalAction, default=True)
    p.add_argument('--compile', action='store_true', dest='compile_model')
    p.add_argument('--cuda-graph', action='store_true')
    p.add_argument('--gradient-as-bucket-view', action=argparse.BooleanOptionalAction,
                   default=True)
    p.add_argument('--momentum', type=float, default=0.0)
    p.add_argument('--weight-decay', type=float, default=0.0)
    p.add_argument('--lr-schedule', choices=['cosine', 'linear'], default=None,
                   help="'linear': warm-up over --warmup of the steps, then decay to 0")
    tta = p.add_argument_group('time-to-accuracy options (as d2lzh.torch.train; '
                               'd2l.FAST_RECIPE is --momentum 0.9 --weight-decay 5e-4 '
                               '--nesterov --lr-schedule linear --warmup 0.2 '
                               '--label-smoothing 0.1 --target-accuracy 0.92 --eval-from 2)')
    tta.add_argument('--nesterov', action='store_true')
    tta.add_argument('--label-smoothing', type=float, default=0.0)
    tta.add_argument('--warmup', type=float, default=0.0,
                     help='fraction of all steps (with --lr-schedule linear)')
    tta.add_argument('--target-accuracy', type=float, default=None,
                     help="stop after the first epoch whose test accuracy (rank 0's) is >= this")
    tta.add_argument('--eval-from', type=int, default=1,
                     help='first epoch after which the test set is evaluated')
    p.add_argument('--backend', choices=['nccl', 'gloo'], default=None,
                   help='default: nccl with GPUs, else gloo')
    p.add_argument('--timeout', type=float, default=DEFAULTS['timeout'],
                   help='seconds before a process gives up (collectives and the whole run)')
    p.add_argument('--seed', type=int, default=0)
    p.add_argument('--checkpoint', default=None,
                   help='file saved after every epoch and resumed from after a restart '
                        '(on storage that every node sees)')
    p.add_argument('--out', default=None, help="folder for rank 0's result.json")
    p.add_argument('--quiet', action='store_false', dest='verbose')
    return p


def main(argv=None):
    """Command-line entry of ``python -m d2lzh.torch.distributed`` (under
    torchrun): parse the options, run :func:`ddp_worker`, and on rank 0 print
    one summary line. Returns None."""
    cfg = vars(_parser().parse_args(argv))
    result = ddp_worker(cfg)
    if result is not None:
        acc = f', test acc {result["test_acc"][-1]:.3f}' if result['test_acc'] else ''
        if cfg['target_accuracy'] is not None:
            reached = result['reached']
            acc += (f' (target {cfg["target_accuracy"]} reached after epoch {reached["epoch"]}, '
                    f'{reached["seconds"]:.1f} s into training)' if reached else
                    f' (target {cfg["target_accuracy"]} not reached)')
        print(f'world size {result["world_size"]} ({result["backend"]}, {result["device"]}, '
              f'amp {result["amp"]}): {result["images_per_s"]:.0f} images/s in the best '
              f'epoch{acc}; replicas identical: {len(set(result["params_digest"])) == 1}')


# ------------------------------------------------------------------ from a notebook

def run_ddp(world_size, num_epochs=4, batch_size=256, lr=0.1, max_examples=None,
            model='resnet18', amp=True, channels_last=True, compile_model=False,
            cuda_graph=False, gradient_as_bucket_view=True, momentum=0.0, weight_decay=0.0,
            lr_schedule=None, backend=None, timeout=900.0, seed=0, checkpoint=None,
            verbose=False, max_restarts=0, join_timeout=60.0, *, nesterov=False,
            label_smoothing=0.0, warmup=0.0, target_accuracy=None, eval_from=1):
    """Run :func:`ddp_worker` in ``world_size`` processes on this machine, from
    Python (a notebook), through ``torch.distributed.launcher.api.elastic_launch``:
    what ``torchrun --nproc-per-node=world_size`` does, with c10d rendezvous on
    127.0.0.1 (a free port) and no other address.

    The worker is an importable function (the new processes are spawned and
    import it by name: a function defined in a notebook would fail). The
    kernel's SIGINT/SIGTERM handlers, which the launcher replaces, are put
    back, and the ``torchelastic_*`` folder it writes its logs to is removed.
    The workers' stderr goes to files there (a Jupyter kernel would forward
    it, local paths and all, into the cell); Python logging is off meanwhile.

    Args:
        world_size (int): processes (one GPU each with NCCL).
        max_restarts (int): how often the group is restarted after a failure
            (resuming from ``checkpoint`` if given).
        join_timeout (float): seconds the rendezvous waits for every process.
        num_epochs, batch_size (per process), lr, max_examples, model, amp,
        channels_last, compile_model, cuda_graph, gradient_as_bucket_view,
        momentum, weight_decay, lr_schedule, backend, timeout (s), seed,
        checkpoint, verbose, and (keyword only) nesterov, label_smoothing,
        warmup, target_accuracy, eval_from: the worker's settings, see
        :func:`ddp_worker` (``**d2l.FAST_RECIPE`` fits).

    Returns:
        dict: rank 0's result (see :func:`ddp_worker`).

    Raises:
        ValueError: a bad ``world_size`` or setting, more NCCL processes than
            GPUs, or ``cuda_graph`` with more than one process.
        RuntimeError: a worker failed (after ``max_restarts`` restarts); the
            message names the rank, its exit code and the end of its
            traceback (torch's ``ChildFailedError`` is chained as the cause).
    """
    _checks.check_positive_int('world_size', world_size)
    if isinstance(max_restarts, bool) or not isinstance(max_restarts, int) or max_restarts < 0:
        raise ValueError(f'max_restarts={max_restarts!r} is not valid: use a whole number >= 0')
    cfg = _config({name: value for name, value in locals().items() if name in DEFAULTS})
    backend = cfg['backend'] or ('nccl' if _book.num_gpus() > 0 else 'gloo')
    have = _book.num_gpus()
    if backend == 'nccl' and have < world_size:
        names = ', '.join(f'cuda:{i} ({_book.gpu_name(i)})' for i in range(have))
        raise ValueError(f'asked for {world_size} GPUs but this machine has {have}: '
                         f'{names or "none"}. Ask for at most {have} processes, or '
                         "use backend='gloo'.")
    _refuse_graph_with_several(cfg['cuda_graph'], backend, world_size)
    cfg['backend'] = backend
    return _launch(world_size, ddp_worker, (cfg,), max_restarts, join_timeout)[0]


def _launch(world_size, entrypoint, args, max_restarts=0, join_timeout=60.0):
    """``elastic_launch`` of ``entrypoint(*args)`` in ``world_size`` local
    processes (c10d rendezvous on 127.0.0.1, a free port, spawn), with the
    caller's SIGINT/SIGTERM handlers put back, the launcher's log folders
    removed. While it runs, Python logging is off (the launcher logs every
    step, with local paths) and the workers' stderr goes to files in the
    log folder (a Jupyter kernel would forward it into the cell); a failing
    worker's traceback reaches the RuntimeError through its error file.
    Returns {rank: return value}; a failure raises RuntimeError."""
    import logging

    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    log_dir = tempfile.mkdtemp(prefix='d2lzh-ddp-')
    before = set(_torchelastic_dirs())
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    disabled = logging.root.manager.disable
    logging.disable(logging.CRITICAL)  # the launcher's own log lines, during the launch
    launch = LaunchConfig(
        min_nodes=1, max_nodes=1, nproc_per_node=world_size, run_id=uuid.uuid4().hex,
        rdzv_backend='c10d', rdzv_endpoint='127.0.0.1:0',
        rdzv_configs={'join_timeout': join_timeout}, max_restarts=max_restarts,
        monitor_interval=0.1, start_method='spawn', **_log_dir_option(log_dir))
    try:
        return elastic_launch(launch, entrypoint)(*args)
    except ChildFailedError as err:
        raise RuntimeError(_failure_message(err, world_size, max_restarts)) from err
    finally:
        logging.disable(disabled)
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
        shutil.rmtree(log_dir, ignore_errors=True)
        for d in set(_torchelastic_dirs()) - before:
            shutil.rmtree(d, ignore_errors=True)


@record
def _allreduce_worker(sizes, repeats, backend):
    import torch.distributed as dist

    rank, local_rank, world_size = _env_int('RANK'), _env_int('LOCAL_RANK'), \
        _env_int('WORLD_SIZE')
    if backend == 'nccl':
        device = torch.device(f'cuda:{local_rank}')
        torch.cuda.set_device(device)
    else:
        device = torch.device('cpu')
        torch.set_num_threads(1)
    timeout = timedelta(seconds=300)
    dist.init_process_group(backend, store=_attempt_store(rank, world_size, timeout),
                            rank=rank, world_size=world_size, timeout=timeout)
    try:
        times = []
        for size in sizes:
            x = torch.ones(max(1, size // 4), dtype=torch.float32, device=device)
            dist.all_reduce(x)  # warm-up: connections and buffers
            best = float('inf')
            for _ in range(repeats):
                _book.synchronize(device)
                dist.barrier()
                start = time.perf_counter()
                dist.all_reduce(x)
                _book.synchronize(device)
                best = min(best, time.perf_counter() - start)
            t = torch.tensor([best], dtype=torch.float64, device=device)
            dist.all_reduce(t, op=dist.ReduceOp.MAX)  # the slowest rank sets the pace
            times.append(t.item())
    finally:
        dist.destroy_process_group()
    return times if rank == 0 else None


def measure_allreduce(world_size, sizes, repeats=5, backend=None):
    """Time one all-reduce (sum) of float32 tensors across ``world_size``
    local processes, started with ``elastic_launch`` as :func:`run_ddp` does.

    For each size: one warm-up all-reduce, then ``repeats`` timed ones, each
    between a barrier and a synchronisation; the best of them, from the
    slowest rank, is reported. Beyond the book.

    Args:
        world_size (int): processes (one GPU each with NCCL).
        sizes (list of int): tensor sizes in bytes (multiples of 4).
        repeats (int): timed all-reduces per size.
        backend (str or None): 'nccl' or 'gloo'; default nccl with GPUs.

    Returns:
        list of float: seconds per all-reduce, one per size.

    Raises:
        ValueError: bad arguments, or more NCCL processes than GPUs.
        RuntimeError: a process failed.
    """
    _checks.check_positive_int('world_size', world_size)
    _checks.check_positive_int('repeats', repeats)
    for size in sizes:
        _checks.check_positive_int('size', size)
    backend = backend or ('nccl' if _book.num_gpus() > 0 else 'gloo')
    if backend == 'nccl' and _book.num_gpus() < world_size:
        raise ValueError(f'asked for {world_size} GPUs but this machine has '
                         f'{_book.num_gpus()}: use backend=\'gloo\' or fewer processes')
    return _launch(world_size, _allreduce_worker, (list(sizes), repeats, backend))[0]


def _torchelastic_dirs():
    tmp = tempfile.gettempdir()
    return [os.path.join(tmp, d) for d in os.listdir(tmp) if d.startswith('torchelastic_')]


def _log_dir_option(log_dir):
    """LaunchConfig's way to name the log folder, with the workers' stderr
    sent to files there: ``logs_specs`` (torch >= 2.3)."""
    from torch.distributed.elastic.multiprocessing import Std
    try:
        from torch.distributed.elastic.multiprocessing import DefaultLogsSpecs
    except ImportError:  # older torch: LaunchConfig(log_dir=..., redirects=...)
        return {'log_dir': log_dir, 'redirects': Std.ERR}
    return {'logs_specs': DefaultLogsSpecs(log_dir=log_dir, redirects=Std.ERR)}


def _failure_message(err, world_size, max_restarts):
    """'worker rank R of W ...: exit code, last line of the traceback' from a ChildFailedError."""
    # the agent SIGTERMs the others: the root cause is a process that died of
    # another signal (e.g. SIGKILL), else the earliest failure
    signalled = [(r, f) for r, f in err.failures.items()
                 if f.exitcode < 0 and f.exitcode != -signal.SIGTERM]
    rank, failure = min(signalled, key=lambda rf: rf[1].timestamp) if signalled \
        else err.get_first_failure()
    others = sorted(r for r in err.failures if r != rank)
    detail = 'no traceback (the process was killed by a signal or exited without one)'
    message = failure.message
    if isinstance(message, dict):
        message = message.get('message', '')
    if message and not str(message).startswith(('To enable traceback', 'Signal ')):
        lines = [ln for ln in str(message).strip().splitlines() if ln.strip()]
        detail = lines[-1] if lines else detail
    code = failure.exitcode
    sig = f' ({signal.Signals(-code).name})' if code < 0 and -code in signal.valid_signals() \
        else ''
    restarts = f' after {max_restarts} restart(s)' if max_restarts else ''
    also = f' (then rank(s) {others} failed too)' if others else ''
    return (f'DDP worker rank {rank} of {world_size} failed{restarts} with exit code '
            f'{code}{sig}: {detail}{also}. The other workers were stopped.')


if __name__ == '__main__':
    main()
