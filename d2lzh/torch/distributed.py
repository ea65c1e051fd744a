"""DistributedDataParallel (book 8.5, beyond it): the worker and its launcher."""
import json
import os
import socket
import sys
import tempfile
import time
import traceback
import warnings
from datetime import timedelta

import numpy as np
import torch
from torch import nn

from .. import checks as _checks
from .. import data as _data
from . import book as _book
from .book import evaluate_accuracy, gpu_name, resnet18, synchronize
from .iterators import FashionMNISTIter
from .training import _autocast, _capture_step, _capture_stream, _lr_factor

__all__ = ['run_ddp', 'ddp_worker']


# ------------------------------------------------- DistributedDataParallel (8.5)

def _free_port():
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


def ddp_worker(rank, world_size, port, config, out_dir):
    """One process of :func:`run_ddp`: trains ResNet-18 on its shard of the data.

    Each of the ``world_size`` processes drives one GPU (or the CPU, with the
    gloo backend), keeps its own replica of the model, and sees
    ``batch_size`` examples per step; DistributedDataParallel all-reduces the
    gradients (NCCL on GPUs) while the backward pass is still running. Rank 0
    evaluates on the test set after every epoch and writes ``result.json``.
    A failure writes ``error-<rank>.txt`` with the traceback.

    Args:
        rank (int): this process, 0 <= rank < world_size.
        world_size (int): number of processes.
        port (int): TCP port of the rendezvous on 127.0.0.1.
        config (dict): see :func:`run_ddp`.
        out_dir (str): folder for result and error files.
    """
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    warnings.filterwarnings('ignore', message=r'barrier\(\): using the device')
    warnings.filterwarnings('ignore', message='Grad strides do not match bucket view')
    try:
        use_cuda = config['backend'] == 'nccl'
        device = torch.device(f'cuda:{rank}') if use_cuda else torch.device('cpu')
        if use_cuda:
            torch.cuda.set_device(device)
        else:
            torch.set_num_threads(max(1, (os.cpu_count() or 1) // world_size))
        if config.get('cuda_graph'):  # NCCL calls inside a CUDA graph need this off
            os.environ['TORCH_NCCL_ASYNC_ERROR_HANDLING'] = '0'
        dist.init_process_group(config['backend'], init_method=f'tcp://127.0.0.1:{port}',
                                rank=rank, world_size=world_size,
                                timeout=timedelta(seconds=config['timeout']))
        if config.get('fail_rank') == rank:
            raise RuntimeError(f'rank {rank} was asked to fail (fail_rank={rank})')
        torch.manual_seed(config['seed'])
        train_x, train_y, test_x, test_y = _data.load_fashion_mnist(
            max_examples=config['max_examples'] or 'all', progress=False)
        X = torch.tensor(train_x, dtype=torch.uint8).unsqueeze(1).to(device)
        Y = torch.from_numpy(train_y.astype(np.int64)).to(device)
        fmt = torch.channels_last if config['channels_last'] else torch.contiguous_format
        net = resnet18(10).to(device, memory_format=fmt)
        use_graph = bool(config.get('cuda_graph')) and use_cuda
        # With a graph, DDP must be built on the stream that later records it
        # (torch.cuda.stream(None) changes nothing).
        stream = _capture_stream(device) if use_graph else None
        with torch.cuda.stream(stream):
            model = DistributedDataParallel(
                net, device_ids=[rank] if use_cuda else None,
                gradient_as_bucket_view=config.get('gradient_as_bucket_view', True))
        if stream is not None:
            torch.cuda.current_stream(device).wait_stream(stream)
        optimizer = torch.optim.SGD(model.parameters(), lr=config['lr'],
                                    momentum=config['momentum'],
                                    weight_decay=config['weight_decay'])
        loss_fn = nn.CrossEntropyLoss()
        test_iter = FashionMNISTIter(test_x, test_y, 512, False, device=device)
        per_rank = len(Y) // world_size
        bs = config['batch_size']
        history = {'epoch_times': [], 'test_acc': [], 'world_size': world_size,
                   'backend': config['backend'], 'cuda_graph': use_graph,
                   'device': gpu_name(rank) if use_cuda else 'cpu'}
        graph = static = None
        examples = 0
        for epoch in range(config['num_epochs']):
            new_lr = config['lr'] * _lr_factor(config['lr_schedule'], epoch,
                                               config['num_epochs'])
            if new_lr != optimizer.param_groups[0]['lr']:
                graph = None  # the learning rate is baked into a recorded graph
            for group in optimizer.param_groups:
                group['lr'] = new_lr
            g = torch.Generator().manual_seed(config['seed'] + epoch)  # same on every rank
            shard = torch.randperm(len(Y), generator=g)[rank * per_rank:(rank + 1) * per_rank]
            shard = shard.to(device)
            model.train()
            synchronize(device)
            dist.barrier()
            start = time.perf_counter()
            examples = 0
            for i in range(0, per_rank, bs):
                idx = shard[i:i + bs]
                xb = X[idx].float().div_(255).contiguous(memory_format=fmt)
                if use_graph:
                    if len(idx) < bs:
                        continue  # every rank skips the same short last batch
                    if static is None:
                        static = (xb.clone(memory_format=fmt), Y[idx].clone())
                    static[0].copy_(xb)
                    static[1].copy_(Y[idx])
                    if graph is None:  # DDP asks for 11 eager steps before capture
                        graph, _ = _capture_step(model, loss_fn, optimizer, *static,
                                                 config['amp'], warmup=epoch == 0,
                                                 warmup_steps=11)
                    graph.replay()
                else:
                    with _autocast(device, config['amp']):
                        loss = loss_fn(model(xb), Y[idx])
                    optimizer.zero_grad(set_to_none=True)
                    loss.backward()
                    optimizer.step()
                examples += len(idx)
            synchronize(device)
            dist.barrier()
            history['epoch_times'].append(time.perf_counter() - start)
            if rank == 0:
                with _autocast(device, config['amp']):
                    history['test_acc'].append(evaluate_accuracy(test_iter, net, device))
        history['examples'] = examples * world_size
        history['images_per_s'] = history['examples'] / min(history['epoch_times'])
        if rank == 0:
            with open(os.path.join(out_dir, 'result.json'), 'w') as f:
                json.dump(history, f)
        dist.destroy_process_group()
    except BaseException:
        with open(os.path.join(out_dir, f'error-{rank}.txt'), 'w') as f:
            f.write(traceback.format_exc())
        sys.exit(1)  # run_ddp reports the error; no traceback spilled on stderr


def run_ddp(world_size, num_epochs=4, batch_size=256, lr=0.1, max_examples=None,
            amp=True, channels_last=True, cuda_graph=False, gradient_as_bucket_view=True,
            momentum=0.0, weight_decay=0.0, lr_schedule=None, backend=None, timeout=900, seed=0,
            fail_rank=None):
    """Train ResNet-18 on Fashion-MNIST with DistributedDataParallel.

    Starts ``world_size`` fresh processes (``spawn``) running
    :func:`ddp_worker`, one per GPU, with NCCL; on a machine without GPUs the
    processes share the CPU and use gloo. Waits for them with a deadline: if
    a worker dies, the others are killed and the error names the rank, its
    exit code and its traceback; if the deadline passes, all are killed.
    No child process outlives this call.

    Args:
        world_size (int): number of processes (GPUs).
        num_epochs (int): passes over the data.
        batch_size (int): examples per step *per process*.
        lr (float): SGD learning rate.
        max_examples (int or None): first N training/test examples (None: all).
        amp (bool): bf16 autocast on GPUs.
        channels_last (bool): NHWC memory format.
        cuda_graph (bool): record the process's whole step, gradient
            all-reduce included, as a CUDA graph (NCCL only; ignored with
            gloo). The first 11 steps run eagerly, as DDP requires before a
            capture; a short last batch is skipped, as in :func:`train`.
            One process only: with two processes the captured step hung on
            2x H200 (PyTorch 2.11), so ``world_size > 1`` is refused.
        gradient_as_bucket_view (bool): DDP's option of that name: the
            gradients live directly in DDP's all-reduce buckets instead of
            being copied into them. With channels_last the gradients' strides
            do not match the buckets' (DDP warns), so the copy comes back.
            On 2x H200 it made 2 processes faster and 1 process slower
            (bench/results/*-ddp-options.json); runs vary a lot.
        momentum, weight_decay, lr_schedule: SGD settings, as in :func:`train`.
        backend (str or None): 'nccl' or 'gloo'; default nccl with GPUs.
        timeout (float): seconds before the run is abandoned.
        seed (int): seed of the data order and the initial weights.
        fail_rank (int or None): make that rank raise at start (for tests).

    Returns:
        dict: ``epoch_times`` (s), ``test_acc``, ``images_per_s`` (best epoch,
        all processes together), ``examples``, ``world_size``, ``backend``,
        ``device``.

    Raises:
        ValueError: bad ``world_size`` or ``batch_size``, more GPUs asked
            for than exist, or ``cuda_graph`` with more than one process.
        RuntimeError: a worker failed.
        TimeoutError: the run took longer than ``timeout`` seconds.
    """
    import torch.multiprocessing as mp

    _checks.check_positive_int('world_size', world_size)
    _checks.check_positive_int('batch_size', batch_size)
    _lr_factor(lr_schedule, 0, 1)
    if backend is None:
        backend = 'nccl' if _book.num_gpus() > 0 else 'gloo'
    have = _book.num_gpus()
    if backend == 'nccl' and have < world_size:
        names = ', '.join(f'cuda:{i} ({_book.gpu_name(i)})' for i in range(have))
        raise ValueError(f'asked for {world_size} GPUs but this machine has {have}: '
                         f'{names or "none"}. Ask for at most {have} processes, or '
                         "use backend='gloo'.")
    if cuda_graph and backend == 'nccl' and world_size > 1:
        raise ValueError(
            f'cuda_graph=True with world_size={world_size}: capturing the DDP step in more '
            'than one process never finished on 2x H200 with PyTorch 2.11 (it hung until '
            'the timeout; see bench/results), so it is refused rather than left to hang. '
            'Use cuda_graph=False with several processes, or world_size=1.')
    config = {'num_epochs': num_epochs, 'batch_size': batch_size, 'lr': lr,
              'max_examples': _data.parse_max_examples(max_examples)
              if max_examples is not None else _data.max_examples_from_env(),
              'amp': amp, 'channels_last': channels_last, 'backend': backend,
              'cuda_graph': bool(cuda_graph) and backend == 'nccl',
              'gradient_as_bucket_view': bool(gradient_as_bucket_view),
              'momentum': momentum, 'weight_decay': weight_decay, 'lr_schedule': lr_schedule,
              'timeout': timeout, 'seed': seed, 'fail_rank': fail_rank}
    ctx = mp.get_context('spawn')
    port = _free_port()
    with tempfile.TemporaryDirectory(prefix='d2lzh-ddp-') as out_dir:
        procs = [ctx.Process(target=ddp_worker, args=(r, world_size, port, config, out_dir),
                             daemon=True) for r in range(world_size)]
        for p in procs:
            p.start()
        deadline = time.monotonic() + timeout
        try:
            while True:
                codes = [p.exitcode for p in procs]
                failed = [(r, c) for r, c in enumerate(codes) if c not in (None, 0)]
                if failed:
                    rank, code = failed[0]
                    err_file = os.path.join(out_dir, f'error-{rank}.txt')
                    detail = open(err_file).read().strip().splitlines()[-1] \
                        if os.path.exists(err_file) else 'no traceback was written'
                    raise RuntimeError(f'DDP worker rank {rank} of {world_size} exited with '
                                       f'code {code}: {detail}. The other workers were '
                                       'stopped.')
                if all(c == 0 for c in codes):
                    break
                if time.monotonic() > deadline:
                    raise TimeoutError(f'DDP training did not finish within {timeout} s; '
                                       'all workers were stopped. Raise timeout= or '
                                       'train on fewer examples.')
                time.sleep(0.2)
        finally:
            for p in procs:
                if p.is_alive():
                    p.kill()
            for p in procs:
                p.join(timeout=30)
        with open(os.path.join(out_dir, 'result.json')) as f:
            return json.load(f)
