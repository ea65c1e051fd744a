"""DistributedDataParallel from a notebook (beyond the book): :func:`run_ddp` and
:func:`measure_allreduce` run N processes of this machine through torchrun's Python API
(``elastic_launch``). ``python -m d2lzh.torch.launch --nproc-per-node 2 [flags]``
(:func:`main`): ``torchrun --standalone -m d2lzh.torch.ddp [flags]``, started sooner."""
import argparse
import dataclasses
import logging
import os
import re
import shutil
import signal
import sys
import tempfile
import time
import uuid

import torch
import torch.distributed as dist
from torch.distributed.elastic.multiprocessing import DefaultLogsSpecs, Std
from torch.distributed.elastic.multiprocessing.errors import ChildFailedError, record
from torch.distributed.launcher.api import LaunchConfig, elastic_launch

from ..checks import check_positive_int, whole
from .book import synchronize
from .ddp import (Job, _parse, choose_backend, ddp_worker, fashion_mnist,
                  init_process_group, result_line)
from .recipe import Recipe


def run_ddp(world_size, recipe=None, *, max_restarts=0, join_timeout=60.0, **job):
    """Run :func:`d2lzh.torch.ddp.ddp_worker` (``recipe``; keywords: fields of
    ``Job``, ``verbose`` False here) in ``world_size`` processes of this machine,
    ``max_restarts`` after a failure (from ``recipe.checkpoint`` if set), logging off,
    the workers' stderr in files. Returns rank 0's result. ValueError: a bad argument,
    more NCCL processes than GPUs; RuntimeError: a worker failed, naming its rank, exit
    code and last line."""
    check_positive_int('world_size', world_size)
    if not whole(max_restarts, 0):
        raise ValueError(f'max_restarts={max_restarts!r} 无效：请用不小于 0 的整数')
    if unknown := sorted(set(job) - {f.name for f in dataclasses.fields(Job)}):
        raise ValueError(f'未知的设置 {unknown}：run_ddp 的关键字参数是 d2lzh.torch.ddp.Job '
                         '的字段；每个进程怎样训练写在 recipe 里，例如 '
                         'run_ddp(2, d2l.Recipe(epochs=2, lr=0.2))')
    recipe, job = recipe or Recipe(), Job(**{'verbose': False, **job})
    job = dataclasses.replace(job, backend=choose_backend(job.backend, world_size))
    return _launch(world_size, ddp_worker, (recipe, job), max_restarts, join_timeout)[0]


def _launch(world_size, entrypoint, args, max_restarts=0, join_timeout=60.0, start='spawn'):
    """{rank: ``entrypoint(*args)``} from ``world_size`` processes, as :func:`run_ddp`
    says (``start`` 'fork': only while CUDA is not initialised)."""
    log_dir = tempfile.mkdtemp(prefix='d2lzh-ddp-')
    before = set(_leftovers())
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    disabled = logging.root.manager.disable
    logging.disable(logging.CRITICAL)  # the launcher logs every step
    config = LaunchConfig(
        min_nodes=1, max_nodes=1, nproc_per_node=world_size, run_id=uuid.uuid4().hex,
        rdzv_backend='c10d', rdzv_endpoint='127.0.0.1:0', max_restarts=max_restarts,
        rdzv_configs={'join_timeout': join_timeout}, monitor_interval=0.1, start_method=start,
        logs_specs=DefaultLogsSpecs(log_dir=log_dir, redirects=Std.ERR))
    if start == 'fork':
        entrypoint, args = _forked_worker, (entrypoint, *args)
    try:
        return elastic_launch(config, entrypoint)(*args)
    except ChildFailedError as err:
        raise RuntimeError(_failure_message(err, world_size, max_restarts)) from err
    finally:
        logging.disable(disabled)
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
        for path in [log_dir, *(set(_leftovers()) - before)]:
            shutil.rmtree(path, ignore_errors=True) if os.path.isdir(path) else os.remove(path)


def _forked_worker(entrypoint, *args):
    """``entrypoint(*args)`` with the default signal actions: the agent's handlers,
    inherited, raise in Python, which a worker blocked in a collective never reaches."""
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT):
        signal.signal(sig, signal.SIG_DFL)
    return entrypoint(*args)


def _leftovers():  # what torch leaves in the temporary folder, and never removes
    tmp = tempfile.gettempdir()
    return [os.path.join(tmp, name) for name in os.listdir(tmp)
            if name.startswith(('torchelastic_', 'pytorch-errorfile-', 'torchinductor_'))]


def _when(rank_failure):
    """When a failure happened: its error file's time, else torch's (whole seconds)."""
    failure = rank_failure[1]
    try:
        return os.stat(failure.error_file).st_mtime_ns / 1e9
    except (OSError, TypeError):
        return failure.timestamp


def _failure_message(err, world_size, max_restarts):
    """The failing rank, its exit code and exception; then its traceback, shortened."""
    # the agent SIGTERMs the others: the cause died of another signal, else failed first
    signalled = [(r, f) for r, f in err.failures.items()
                 if f.exitcode < 0 and f.exitcode != -signal.SIGTERM]
    rank, failure = min(signalled or err.failures.items(), key=_when)
    detail, stack = '没有 traceback（进程被信号杀死，或退出时没有留下）', ''
    info = failure.message if isinstance(failure.message, dict) else {'message': failure.message}
    message = str(info.get('message') or '')
    if message and not message.startswith(('To enable traceback', 'Signal ')):
        detail = ([ln for ln in message.splitlines() if ln.strip()] or [detail])[-1]
        stack = str(info.get('extraInfo', {}).get('py_callstack') or '').rstrip()
        stack = re.sub(r'File "[^"]*?/((?:d2lzh|torch)/[^"]*)"', r'File "\1"', stack)
    code = failure.exitcode
    sig = f' ({signal.Signals(-code).name})' if -code in signal.valid_signals() else ''
    others = sorted(r for r in err.failures if r != rank)
    return (f'DDP 工作进程 rank {rank}（共 {world_size} 个）'
            f'{f"重启 {max_restarts} 次之后" if max_restarts else ""}失败，退出码 '
            f'{code}{sig}：{detail}{f"（随后 rank {others} 也失败了）" if others else ""}。'
            '其余工作进程已被停止。' + (f'\nrank {rank} 的 {stack}' if stack else ''))


@record
def _allreduce_worker(sizes, repeats, backend):
    rank, _, device = init_process_group(backend, timeout=300)
    try:
        times = []
        for size in sizes:
            x = torch.ones(max(1, size // 4), dtype=torch.float32, device=device)
            dist.all_reduce(x)  # warm-up: connections and buffers
            best = float('inf')
            for _ in range(repeats):
                synchronize(device)
                dist.barrier()
                start = time.perf_counter()
                dist.all_reduce(x)
                synchronize(device)
                best = min(best, time.perf_counter() - start)
            t = torch.tensor([best], dtype=torch.float64, device=device)
            dist.all_reduce(t, op=dist.ReduceOp.MAX)  # the slowest rank's
            times.append(t.item())
    finally:
        dist.destroy_process_group()
    return times if rank == 0 else None


def measure_allreduce(world_size, sizes, repeats=5, backend=None):
    """Seconds of one all-reduce (sum) of a float32 tensor of each of ``sizes`` bytes
    (multiples of 4) across ``world_size`` local processes over ``backend`` (default:
    nccl with GPUs, else gloo): the best of ``repeats`` after one untimed, from the
    slowest rank (beyond the book). ValueError: bad arguments, more NCCL processes than
    GPUs; RuntimeError: a process failed."""
    for name, value in [('world_size', world_size), ('repeats', repeats),
                        *(('size', size) for size in sizes)]:
        check_positive_int(name, value)
    backend = choose_backend(backend, world_size)
    return _launch(world_size, _allreduce_worker, (list(sizes), repeats, backend))[0]


def main(argv=None):
    """The command line (module docstring): the agent runs here and forks the workers,
    which inherit torch and the data; CUDA is first touched in them. Prints rank 0's
    summary; exits with 1 and the failing rank's traceback when a worker fails."""
    first = argparse.ArgumentParser(add_help=False)
    first.add_argument('--nproc-per-node', type=int, default=1, help='processes: one per GPU '
                       'with NCCL (default: 1)')
    n = first.parse_known_args(argv)[0].nproc_per_node
    recipe, job = _parse(argv, argparse.ArgumentParser(
        prog='python -m d2lzh.torch.launch', parents=[first], description='The job of torchrun '
        '--standalone -m d2lzh.torch.ddp, its workers forked from this process.'))
    os.environ['PYTORCH_NVML_BASED_CUDA_CHECK'] = '1'  # count GPUs without CUDA
    try:
        check_positive_int('--nproc-per-node', n)
        job = dataclasses.replace(job, backend=choose_backend(job.backend, n))
        fashion_mnist(job.max_examples)  # read once, before forking
        result = _launch(n, ddp_worker, (recipe, job), start='fork')[0]
    except (ValueError, RuntimeError) as err:
        sys.exit(f'python -m d2lzh.torch.launch: {err}')
    print(result_line(result, recipe))


if __name__ == '__main__':
    main()
