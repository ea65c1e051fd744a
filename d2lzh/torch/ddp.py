"""The torchrun worker: DistributedDataParallel on Fashion-MNIST (book 8.5, and beyond it)::

    torchrun --standalone --nproc-per-node=N -m d2lzh.torch.ddp --epochs 4
    torchrun --nnodes=2 --node-rank=R --nproc-per-node=N --rdzv-backend=c10d \\
        --rdzv-endpoint=HOST:PORT --rdzv-id=JOB -m d2lzh.torch.ddp --fast ...

Each process reads its rank and the world size from torchrun's environment, joins the
process group (NCCL with one GPU per local rank, gloo on the CPU), takes its shard
(:class:`d2lzh.torch.data.ShardIter`), wraps the network in DistributedDataParallel and
trains it with :func:`d2lzh.torch.recipe.train_fast`. Its flags are the fields of
:class:`d2lzh.torch.recipe.Recipe` (how it trains; ``--fast`` starts from ``FAST``) and of
:class:`Job`. A process ends itself at its deadline or when its launcher is gone
(:func:`d2lzh.jobs.watch`); ``$D2LZH_FAULT=KIND:RANK:STEP`` makes one fail on purpose, on
the first attempt only (:func:`d2lzh.jobs.inject_faults`). :func:`d2lzh.torch.launch.run_ddp`
runs the same worker from a notebook.
"""
import argparse
import dataclasses
import hashlib
import json
import os
import socket
import warnings
from datetime import timedelta

import torch
import torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import record
from torch.nn.parallel import DistributedDataParallel

from .. import data as _data
from .. import jobs as _jobs
from .book import gpu_name, lenet, num_gpus, resnet18
from .data import FashionMNISTIter, ShardIter
from .recipe import FAST, Recipe, capture_stream, train_fast
from .settings import add_flags, check_fields, from_flags, setting

__all__ = ['Job', 'ddp_worker', 'main', 'torchrun_env', 'init_process_group',
           'refuse_graph_with_several', 'GRAPH_EXPERIMENT_ENV']

#: Set to 1 to record the DDP step as a CUDA graph in several NCCL processes anyway, to look
#: into the hang (docs/gpu-runs.md); the job's timeout still ends a hung run.
GRAPH_EXPERIMENT_ENV = 'D2LZH_DDP_GRAPH_EXPERIMENT'


@dataclasses.dataclass(frozen=True)
class Job:
    """What a worker trains and how it takes part in the job (:class:`Recipe` says how it
    trains). Raises ValueError for a field of the wrong type or value."""
    model: str = setting('resnet18', "lenet is the book's 8.4 LeNet (no batch norm)",
                         choices=('resnet18', 'lenet'))
    max_examples: str = setting(None, 'first N training and test images, or all (none: '
                                '$D2LZH_MAX_EXAMPLES, else all)', str)
    backend: str = setting(None, 'none: nccl with GPUs, else gloo', str, (None, 'nccl', 'gloo'))
    gradient_as_bucket_view: bool = setting(True, "DDP's option: gradients live in its buckets")
    timeout: float = setting(900.0, 'seconds before a process gives up (the run, a collective)',
                             valid='(0, inf)')
    seed: int = setting(0, 'seed of the initial weights and of the data order')
    out: str = setting(None, "folder for rank 0's result.json", str)
    verbose: bool = setting(True, 'rank 0 prints one line per epoch')

    def __post_init__(self):
        if self.max_examples is not None:
            object.__setattr__(self, 'max_examples', str(self.max_examples))
        check_fields(self)


def torchrun_env():
    """(rank, local_rank, world_size) from torchrun's environment.

    Raises:
        RuntimeError: not started by torchrun (the message says how to start it).
    """
    try:
        return tuple(int(os.environ[name]) for name in ('RANK', 'LOCAL_RANK', 'WORLD_SIZE'))
    except KeyError as err:
        raise RuntimeError(f'${err.args[0]} is not set: the worker runs under torchrun, e.g. '
                           '`torchrun --standalone --nproc-per-node=2 -m d2lzh.torch.ddp`, or '
                           'through d2l.run_ddp') from None


def init_process_group(backend, rank, world_size, timeout):
    """Join the process group through torchrun's store at ``MASTER_ADDR:MASTER_PORT``, with
    keys under a prefix of this attempt (``TORCHELASTIC_RESTART_COUNT``): torchrun reuses
    its store across restarts, and gloo could read a dead process's address there (seen in
    2 of 3 restarts with torch 2.13). On one machine gloo's and NCCL's own sockets stay on
    the loopback interface. ``timeout`` (s) bounds every collective."""
    if os.environ.get('MASTER_ADDR') in ('127.0.0.1', 'localhost'):
        for _, name in socket.if_nameindex():
            if name.startswith('lo'):  # 'lo' on Linux, 'lo0' on macOS
                os.environ.setdefault('GLOO_SOCKET_IFNAME', name)
                os.environ.setdefault('NCCL_SOCKET_IFNAME', name)
                break
    timeout = timedelta(seconds=timeout)
    agent_hosts_it = os.environ.get('TORCHELASTIC_USE_AGENT_STORE') == 'True'
    store = dist.TCPStore(os.environ['MASTER_ADDR'], int(os.environ['MASTER_PORT']), world_size,
                          is_master=not agent_hosts_it and rank == 0, timeout=timeout)
    attempt = os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')
    dist.init_process_group(backend, store=dist.PrefixStore(f'd2lzh/attempt_{attempt}', store),
                            rank=rank, world_size=world_size, timeout=timeout)


def refuse_graph_with_several(cuda_graph, backend, world_size):
    """Raise ValueError for ``cuda_graph`` with NCCL and more than one process (it hung on 2x
    H200 with PyTorch 2.11), unless ``$D2LZH_DDP_GRAPH_EXPERIMENT=1`` (a RuntimeWarning)."""
    if cuda_graph and backend == 'nccl' and world_size > 1:
        if os.environ.get(GRAPH_EXPERIMENT_ENV) == '1':
            warnings.warn(f'{GRAPH_EXPERIMENT_ENV}=1: recording the DDP step with world_size='
                          f'{world_size}; this hung before, and only the timeout ends it if it '
                          'hangs again', RuntimeWarning, stacklevel=2)
            return
        raise ValueError(f'cuda_graph=True with world_size={world_size}: capturing the DDP step '
                         'in more than one process never finished on 2x H200 with PyTorch 2.11 '
                         '(see bench/README.md), so it is refused rather than left to hang. Use '
                         'cuda_graph=False with several processes, or world_size=1.')


def _params_digest(module):
    """SHA-1 of every parameter's bytes: equal digests mean bitwise-equal replicas."""
    h = hashlib.sha1()
    for p in module.parameters():
        h.update(p.detach().float().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()


@record
def ddp_worker(recipe=None, job=None):
    """One process of a DistributedDataParallel job; run it under torchrun or ``run_ddp``.

    Decorated with torch's ``@record``, so an exception's traceback reaches torchrun's error
    summary. A deadline of ``job.timeout`` seconds bounds the process (exit code 124) and
    every collective; when the launcher is gone the process exits (code 1).

    Args:
        recipe (Recipe): how to train (default ``Recipe()``); ``batch_size`` is per process.
        job (Job): the network, data, backend, timeout, seed, output (default ``Job()``).

    Returns:
        dict or None: on rank 0, :func:`train_fast`'s history with ``examples`` and
        ``images_per_s`` of all processes together, plus ``world_size``, ``backend``,
        ``device``, ``restart_count`` and ``params_digest`` (one SHA-1 per rank); None on
        the other ranks.

    Raises:
        RuntimeError: not started by torchrun, a local rank without a GPU, a failure.
        ValueError: ``cuda_graph`` with NCCL and several processes.
    """
    recipe, job = recipe or Recipe(), job or Job()
    rank, local_rank, world_size = torchrun_env()
    _jobs.watch(job.timeout, f'DDP worker rank {rank}')
    backend = job.backend or ('nccl' if torch.cuda.is_available() else 'gloo')
    refuse_graph_with_several(recipe.cuda_graph, backend, world_size)
    warnings.filterwarnings('ignore', message=r'barrier\(\): using the device')
    warnings.filterwarnings('ignore', message='Grad strides do not match bucket view')
    if backend == 'nccl':
        if local_rank >= num_gpus():
            raise RuntimeError(f'local rank {local_rank} has no GPU: this node has '
                               f'{num_gpus()}; start at most that many processes per node')
        device = torch.device('cuda', local_rank)
        torch.cuda.set_device(device)
        if recipe.cuda_graph:  # NCCL calls inside a CUDA graph need this off
            os.environ['TORCH_NCCL_ASYNC_ERROR_HANDLING'] = '0'
    else:
        device = torch.device('cpu')
        local = int(os.environ.get('LOCAL_WORLD_SIZE', world_size))
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // local))
    init_process_group(backend, rank, world_size, job.timeout)
    restarts = int(os.environ.get('TORCHELASTIC_RESTART_COUNT', '0'))
    try:
        torch.manual_seed(job.seed)  # the same initial weights on every rank
        train_x, train_y, test_x, test_y = _data.load_fashion_mnist(
            max_examples=job.max_examples, progress=False)
        train_iter = ShardIter(train_x, train_y, recipe.batch_size, rank, world_size, job.seed,
                               device)
        if restarts == 0:  # the test seam: D2LZH_FAULT fails one rank on the first attempt
            train_iter = _jobs.inject_faults(train_iter, rank)
        test_iter = FashionMNISTIter(test_x, test_y, 512, False, device=device) \
            if rank == 0 else None
        fmt = torch.channels_last if recipe.channels_last else torch.contiguous_format
        net = (resnet18(10) if job.model == 'resnet18' else lenet()).to(device,
                                                                         memory_format=fmt)
        stream = capture_stream(device) if recipe.cuda_graph and device.type == 'cuda' else None
        with torch.cuda.stream(stream):  # to be recorded, DDP is built on the capture stream
            model = DistributedDataParallel(
                net, device_ids=[local_rank] if device.type == 'cuda' else None,
                gradient_as_bucket_view=job.gradient_as_bucket_view)
        if stream is not None:
            torch.cuda.current_stream(device).wait_stream(stream)
        history = train_fast(model, train_iter, test_iter, device, recipe,
                             verbose=job.verbose and rank == 0)
        digests = [None] * world_size
        dist.all_gather_object(digests, _params_digest(net))
    finally:
        dist.destroy_process_group()
    if rank != 0:
        return None
    history.update(world_size=world_size, backend=backend, restart_count=restarts,
                   device=gpu_name(local_rank) if device.type == 'cuda' else 'cpu',
                   params_digest=digests, examples=history['examples'] * world_size,
                   images_per_s=history['images_per_s'] * world_size)
    if job.out:
        os.makedirs(job.out, exist_ok=True)
        with open(os.path.join(job.out, 'result.json'), 'w') as f:
            json.dump(history, f)
    return history


def _parse(argv=None):
    """The command line -> (Recipe, Job); exits with argparse's usage message on an error."""
    parser = argparse.ArgumentParser(
        prog='torchrun ... -m d2lzh.torch.ddp', description='Train ResNet-18 or LeNet on '
        'Fashion-MNIST with DistributedDataParallel: one process of a torchrun job.')
    parser.add_argument('--fast', action='store_true', help='start from d2l.FAST (the recipe '
                        'fastest to 0.92) instead of the defaults; the flags below change it')
    add_flags(parser.add_argument_group('how each process trains (d2l.Recipe)'), Recipe)
    add_flags(parser.add_argument_group('the job (d2lzh.torch.ddp.Job)'), Job)
    args = parser.parse_args(argv)
    try:
        return [from_flags(args, base) for base in (FAST if args.fast else Recipe(), Job())]
    except ValueError as err:
        parser.error(str(err))


def main(argv=None):
    """``python -m d2lzh.torch.ddp`` (under torchrun): parse the flags, run
    :func:`ddp_worker`, and on rank 0 print one summary line. Returns None."""
    recipe, job = _parse(argv)
    result = ddp_worker(recipe, job)
    if result is not None:
        acc = f', test acc {result["test_acc"][-1]:.3f}' if result['test_acc'] else ''
        if recipe.target_accuracy is not None:
            reached = result['reached']
            acc += (f' (target {recipe.target_accuracy} reached after epoch '
                    f'{reached["epoch"]}, {reached["seconds"]:.1f} s into training)' if reached
                    else f' (target {recipe.target_accuracy} not reached)')
        print(f'world size {result["world_size"]} ({result["backend"]}, {result["device"]}, '
              f'amp {result["amp"]}): {result["images_per_s"]:.0f} images/s in the best '
              f'epoch{acc}; replicas identical: {len(set(result["params_digest"])) == 1}')


if __name__ == '__main__':
    main()
