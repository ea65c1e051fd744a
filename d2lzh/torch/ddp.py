"""The torchrun worker of data parallelism on Fashion-MNIST (book 8.5 and beyond: DDP
or AllReduceParallel): ``torchrun --standalone --nproc-per-node=N -m d2lzh.torch.ddp``
(``--help``; from Python: ``d2l.run_ddp``); :func:`ddp_worker` trains its shard."""
import argparse
import dataclasses
import functools
import hashlib
import json
import math
import os
import socket
import sys
import time
import traceback
import warnings
from datetime import timedelta

import torch
import torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import record

from .. import data as _data, jobs as _jobs
from .book import gpu_name, lenet, num_gpus, resnet18
from .data import FashionMNISTIter, ShardIter
from ..checks import check, flag_rules, real, whole
from .recipe import FAST, Recipe, option, train_fast
from .step import data_parallel

_IMPORTED = time.time()  # a worker's first mark


@dataclasses.dataclass(frozen=True)
class Job:
    """What a worker trains and how it takes part in the job (:class:`Recipe`: how it
    trains). Raises ValueError for a field of the wrong type or value."""
    model: str = option('resnet18', "resnet18, or lenet: the book's 8.4 LeNet")
    conv_bias: bool = option(True, "ResNet-18's convolutions before a batch norm have "
                             "a bias (--no-conv-bias: the fast path's model)")
    max_examples: str = option(None, 'first N training and test images, or all (none: '
                               '$D2LZH_MAX_EXAMPLES, else all)')
    backend: str = option(None, 'nccl or gloo (none: nccl with GPUs, else gloo)')
    data_parallel: str = option('ddp', 'ddp: DistributedDataParallel (8.5); allreduce: '
                                'AllReduceParallel (8.4 grown up, no TorchDynamo)')
    gradient_as_bucket_view: bool = option(True, "DDP's option (ddp only): gradients "
                                           'live in its buckets')
    timeout: float = option(900.0, 'seconds before a process gives up (the run, a '
                            'collective)')
    seed: int = option(0, 'seed of the initial weights and of the data order')
    out: str = option(None, "folder for rank 0's result.json")
    verbose: bool = option(True, 'rank 0 prints one line per epoch')

    def __post_init__(self):
        if self.max_examples is not None:
            object.__setattr__(self, 'max_examples', str(self.max_examples))
        check(self, [
            ('model', self.model in ('resnet18', 'lenet'), "以下之一：('resnet18', 'lenet')"),
            *flag_rules(self),
            ('backend', self.backend in (None, 'nccl', 'gloo'), "以下之一：(None, 'nccl', 'gloo')"),
            ('data_parallel', self.data_parallel in ('ddp', 'allreduce'),
             "以下之一：('ddp', 'allreduce')"),
            ('timeout', real(self.timeout, 0, math.inf, '()'), '大于 0 的秒数'),
            ('seed', whole(self.seed, 0), '不小于 0 的整数'),
            ('out', self.out is None or isinstance(self.out, str), '文件夹名或 None')])


def torchrun_env():
    """(rank, local_rank, world_size) from torchrun's environment; RuntimeError, saying how to
    start the worker, outside torchrun."""
    try:
        return tuple(int(os.environ[name]) for name in ('RANK', 'LOCAL_RANK', 'WORLD_SIZE'))
    except KeyError as err:
        raise RuntimeError(f'没有设置 ${err.args[0]}：工作进程要在 torchrun 下运行，例如 '
                           '`torchrun --standalone --nproc-per-node=2 -m d2lzh.torch.ddp`，'
                           '或者经由 d2l.run_ddp 启动') from None


def choose_backend(backend, local_processes):
    """``backend`` or, every launcher's default, nccl with GPUs, else gloo.
    ValueError: more NCCL processes on this machine than it has GPUs."""
    backend = backend or ('nccl' if num_gpus() > 0 else 'gloo')
    if backend == 'nccl' and num_gpus() < local_processes:
        names = ', '.join(f'cuda:{i} ({gpu_name(i)})' for i in range(num_gpus()))
        raise ValueError(f'要 {local_processes} 块 GPU，这台机器却只有 {num_gpus()} 块'
                         f'{f"（{names}）：进程数不要超过 GPU 数，或者" if names else "：请"}'
                         "用 backend='gloo'（--backend gloo）")
    return backend


def init_process_group(backend, timeout):
    """Join torchrun's job; return (rank, world_size, device): cuda:LOCAL_RANK with NCCL
    (RuntimeError: no such GPU), else the CPU, a share of its cores. Keys go under this
    attempt's prefix in torchrun's store (gloo read a dead process's address there after a
    restart); ``timeout`` (s) bounds every collective."""
    rank, local_rank, world_size = torchrun_env()
    if backend == 'nccl':
        if local_rank >= num_gpus():
            raise RuntimeError(f'local rank {local_rank} 没有对应的 GPU：这个节点只有 '
                               f'{num_gpus()} 块，请每个节点最多启动这么多个进程')
        device = torch.device('cuda', local_rank)
        torch.cuda.set_device(device)
    else:
        device = torch.device('cpu')
        local = int(os.environ.get('LOCAL_WORLD_SIZE', world_size))  # OMP_NUM_THREADS wins
        torch.set_num_threads(int(os.environ.get('OMP_NUM_THREADS') or 0)
                              or max(1, (os.cpu_count() or 1) // local))
    if os.environ.get('MASTER_ADDR') in ('127.0.0.1', 'localhost'):
        for name in [n for _, n in socket.if_nameindex() if n.startswith('lo')][:1]:  # lo0: macOS
            os.environ.setdefault('GLOO_SOCKET_IFNAME', name)
            os.environ.setdefault('NCCL_SOCKET_IFNAME', name)
    timeout = timedelta(seconds=timeout)
    is_master = os.environ.get('TORCHELASTIC_USE_AGENT_STORE') != 'True' and rank == 0
    store = dist.TCPStore(os.environ['MASTER_ADDR'], int(os.environ['MASTER_PORT']), world_size,
                          is_master=is_master, timeout=timeout)
    attempt = os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')
    global _job_store
    _job_store = dist.PrefixStore(f'd2lzh/attempt_{attempt}', store)
    dist.init_process_group(backend, store=_job_store, rank=rank, world_size=world_size,
                            timeout=timeout,
                            device_id=device if backend == 'nccl' else None)
    return rank, world_size, device


_job_store = None  # this attempt's keys in torchrun's store


@functools.cache
def fashion_mnist(max_examples=None):
    """:func:`d2lzh.data.load_fashion_mnist`, once per process (forked workers share
    it)."""
    return _data.load_fashion_mnist(max_examples=max_examples, progress=False)


def _after_a_peer(err):
    """Whether this rank's failure ``err`` follows another's (counted in torchrun's
    store; a broken connection: a killed peer's)."""
    try:
        later = _job_store.add('failures', 1) > 1
    except Exception:  # noqa: BLE001 (the store's host may be the rank that failed)
        later = True
    text = str(err).lower()
    return later or isinstance(err, dist.DistError) or any(
        w in text for w in ('connection reset', 'connection closed', 'broken pipe', 'gloo', 'nccl'))


@record  # the failing rank's traceback in torchrun's error file, for the launcher
def _train(recipe, job):
    """:func:`ddp_worker`, raising what fails."""
    rank, local_rank, world_size = torchrun_env()
    _jobs.watch(job.timeout, f'DDP 工作进程 rank {rank}')
    backend = choose_backend(job.backend, int(os.environ.get('LOCAL_WORLD_SIZE', 1)))
    warnings.filterwarnings('ignore', message=r'barrier\(\): using the device|Grad strides do not')
    # before the process group: NCCL reads its settings as the group is made
    wrap = data_parallel(recipe, backend, local_rank, job.data_parallel)
    marks = {'imported': _IMPORTED}  # time.time() of each stage, in rank 0's result
    rank, world_size, device = init_process_group(backend, job.timeout)
    marks['process_group'] = time.time()
    restarts = int(os.environ.get('TORCHELASTIC_RESTART_COUNT', '0'))
    try:
        torch.manual_seed(job.seed)  # the same initial weights on every rank
        train_x, train_y, test_x, test_y = fashion_mnist(job.max_examples)
        train_iter = ShardIter(train_x, train_y, recipe.batch_size, rank, world_size, job.seed,
                               device)
        if restarts == 0:  # the test seam: $D2LZH_FAULT
            train_iter = _jobs.inject_faults(train_iter, rank)
        test_iter = FashionMNISTIter(test_x, test_y, 512, False, device=device) \
            if rank == 0 else None
        marks['data'] = time.time()  # on the device
        net = resnet18(10, conv_bias=job.conv_bias) if job.model == 'resnet18' else lenet()
        net = net.to(device, memory_format=recipe.memory_format)
        marks['model'] = time.time()  # DDP's construction next imports TorchDynamo
        model = wrap(net, gradient_as_bucket_view=job.gradient_as_bucket_view)
        marks['train_start'] = time.time()  # after the data and the model
        history = train_fast(model, train_iter, test_iter, device, recipe,
                             verbose=job.verbose and rank == 0)
        marks['train_end'] = time.time()
        digest = hashlib.sha1()  # of every parameter: equal ones, equal replicas
        for p in net.parameters():
            digest.update(p.detach().float().cpu().contiguous().numpy().tobytes())
        digests = [None] * world_size
        dist.all_gather_object(digests, digest.hexdigest())
        if rank != 0:
            return None
        history = dataclasses.replace(
            history, world_size=world_size, backend=backend, restart_count=restarts,
            marks=marks, device=gpu_name(device.index) if device.type == 'cuda' else 'cpu',
            params_digest=digests, examples=history.examples * world_size,
            images_per_s=history.images_per_s * world_size)
        if job.out:  # before the teardown below: whatever happens there, the result is kept
            os.makedirs(job.out, exist_ok=True)
            with open(os.path.join(job.out, 'result.json'), 'w') as f:
                json.dump(dataclasses.asdict(history), f)
        return history
    finally:
        if sys.exc_info()[0] is None:  # failed: ddp_worker ends the process instead
            dist.destroy_process_group()


def ddp_worker(recipe=None, job=None):
    """One process of a DDP job (torchrun's or ``run_ddp``'s): trains as ``recipe``
    says (``batch_size`` per process) what ``job`` says; exits at ``job.timeout`` (124)
    or when its launcher is gone (1). Returns rank 0's History with its DDP fields
    (``examples``, ``images_per_s``: all processes'), None on the others. RuntimeError:
    not under torchrun. A failure after joining the job ends the process (exit 1), its
    traceback in torchrun's error file and on stderr."""
    try:
        return _train(recipe or Recipe(), job or Job())
    except BaseException as err:
        if not dist.is_initialized():  # before joining the job: an ordinary error
            raise
        if _after_a_peer(err):  # a peer failed first (or was killed): torchrun is to report
            time.sleep(5)       # that one, its agent stopping this rank meanwhile
        # End at once, without destroy_process_group() (on NCCL it waits for the collective
        # the peers are blocked in); torchrun's agent stops the others.
        traceback.print_exc()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(1)


def _parse(argv=None, parser=None):
    """The command line -> [Recipe, Job], a flag per field (added to ``parser`` if given);
    argparse's exit on an error."""
    parser = parser or argparse.ArgumentParser(
        prog='torchrun ... -m d2lzh.torch.ddp', description='Train ResNet-18 or LeNet on '
        'Fashion-MNIST, data parallel (DDP, or one all-reduce a step): one process of '
        'a torchrun job.')
    parser.add_argument('--fast', action='store_true', help='start from d2l.FAST (the recipe '
                        'fastest to 0.92) instead of the defaults; the flags below change it')
    for title, settings in [('how each process trains (d2l.Recipe)', Recipe),
                            ('the job (d2lzh.torch.ddp.Job)', Job)]:
        group = parser.add_argument_group(title)
        for f in dataclasses.fields(settings):  # lr_warmup: --lr-warmup, a bool: --x/--no-x
            kind = f.type
            options = {'default': argparse.SUPPRESS,
                       'help': f"{f.metadata['help']} (default: {f.default})"}
            if kind is bool:
                options['action'] = argparse.BooleanOptionalAction
            else:  # None is written none
                options['type'] = lambda text, kind=kind: None if text == 'none' else kind(text)
                options['type'].__name__ = kind.__name__  # argparse's error messages name it
            group.add_argument('--' + f.name.replace('_', '-'), **options)
    args = vars(parser.parse_args(argv))
    try:
        return [dataclasses.replace(base, **{f.name: args[f.name] for f in
                                             dataclasses.fields(base) if f.name in args})
                for base in (FAST if args['fast'] else Recipe(), Job())]
    except ValueError as err:
        parser.error(str(err))


def result_line(r, recipe):
    """One line on rank 0's result ``r`` (:func:`ddp_worker`'s) of a job trained as ``recipe``."""
    acc = f'，测试准确率 {r["test_acc"][-1]:.3f}' if r['test_acc'] else ''
    if recipe.target_accuracy is not None:
        acc += f'（目标 {recipe.target_accuracy}：' + (
            f'第 {r["reached"]["epoch"]} 个迭代周期后达到，训练开始后 '
            f'{r["reached"]["seconds"]:.1f} 秒）' if r['reached'] else '没有达到）')
    return (f'进程总数 {r["world_size"]}（{r["backend"]}，{r["device"]}，amp {r["amp"]}）：'
            f'最快的迭代周期 {r["images_per_s"]:.0f} 张/秒{acc}；各副本完全相同：'
            f'{len(set(r["params_digest"])) == 1}')


def main(argv=None):
    """Under torchrun: :func:`ddp_worker` with the flags' settings; rank 0 prints a summary."""
    recipe, job = _parse(argv)
    r = ddp_worker(recipe, job)
    if r is not None:
        print(result_line(r, recipe))


if __name__ == '__main__':
    main()
    # Done: skip the interpreter's teardown, in which gloo's threads made a finished
    # worker crash or hang now and then (torch 2.13, CPU, CI).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
