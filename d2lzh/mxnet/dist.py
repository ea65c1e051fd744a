"""Every process of an MXNet parameter-server job (beyond the book; docs/multi-machine.md),
``$DMLC_ROLE`` saying which: a scheduler or server runs ps-lite inside ``import mxnet``;
a worker, or a process without a role, trains 8.4's LeNet (:func:`train`)."""
import argparse
import contextlib
import itertools
import json
import os
import sys
import time
import traceback

import numpy as np

from .. import jobs
from ..checks import check_positive_int
from ..data import load_fashion_mnist
from ..setup import import_mxnet

ROLES = ('scheduler', 'server', 'worker')
STEP_BATCHES = ('global', 'local')
PREFIX = 'd2lzh.mxnet.dist'
# Set by d2lzh.mxnet.launch for each process it starts:
STATUS_ENV = 'D2LZH_DIST_STATUS'
TIMEOUT_ENV = 'D2LZH_DIST_TIMEOUT'
_status = {}


def write_status(**fields):
    """Add ``fields`` (kv.rank, error) to the JSON file ``$D2LZH_DIST_STATUS`` that the
    launcher reads, if set. Never raises."""
    _status.update(fields)
    if path := os.environ.get(STATUS_ENV):
        with contextlib.suppress(OSError):
            with open(f'{path}.{os.getpid()}.tmp', 'w') as f:
                json.dump(_status, f)
            os.replace(f.name, path)


def train(kvstore=None, batch_size=64, num_workers=None, epochs=1, max_steps=None, lr=0.1,
          max_examples=2048, seed=0, root=None, step_batch='global'):
    """Train 8.4's LeNet with ``gluon.Trainer`` and plain SGD: with a ``'dist_*'``
    ``kvstore`` on this worker's shard (``num_workers``: None or ``kv.num_workers``),
    else alone on the global minibatch of ``num_workers`` (default 1), the reference.
    ``batch_size``: per worker and step; ``step_batch='local'``: the common mistake
    ``trainer.step(batch_size)`` (W workers: W times ``lr``). Returns a dict:
    ``params`` (float32 numpy arrays), ``names``, ``rank``, ``num_workers``, ``steps``,
    ``global_batch``, ``losses`` (per step), ``compute_s``, ``step_s`` (s: forward +
    backward; ``trainer.step``), ``param_bytes``, ``kvstore``, ``lr``, ``step_batch``.
    ValueError: an invalid argument; RuntimeError: a fault from ``$D2LZH_FAULT``."""
    from .book import lenet
    mx = import_mxnet()
    from mxnet import autograd, gluon, nd

    check_positive_int('batch_size', batch_size)
    check_positive_int('epochs', epochs)
    if step_batch not in STEP_BATCHES:
        raise ValueError(f"step_batch={step_batch!r} 无效：请用 'global'（trainer.step 得到 "
                         "batch_size * num_workers，正确）或 'local'（batch_size，演示这个错误）")
    if max_steps is not None and (type(max_steps) is not int or max_steps < 0):
        raise ValueError(f'max_steps={max_steps!r} 无效：请用不小于 0 的整数或 None')
    if kvstore is not None and 'dist' in kvstore:
        kv = mx.kv.create(kvstore)
        rank, workers = kv.rank, kv.num_workers
        if num_workers not in (None, workers):
            raise ValueError(f'num_workers={num_workers} 无效：作业有 {workers} 个工作进程，请用 '
                             f'{workers} 或 None')
        write_status(rank=rank, num_workers=workers)
    else:
        kv, rank, workers = kvstore, None, num_workers or 1
        check_positive_int('num_workers', workers)

    train_x, train_y, _, _ = load_fashion_mnist(root, max_examples=max_examples, progress=False)
    images = train_x.astype(np.float32)[:, None] / 255
    mx.random.seed(seed)
    net = lenet()
    net.initialize(mx.init.Xavier())
    net.hybridize()
    net(nd.zeros((1, 1, 28, 28)))  # create the parameters' shapes
    params = net.collect_params()
    trainer = gluon.Trainer(params, 'sgd', {'learning_rate': lr}, kvstore=kv)
    loss = gluon.loss.SoftmaxCrossEntropyLoss()
    global_batch = batch_size * workers
    batches = ((nd.array(images[idx]), nd.array(train_y[idx])) for epoch in range(epochs)
               for idx in jobs.batch_indices(len(train_y), batch_size, workers, rank, epoch, seed))
    losses, compute_s, step_s = [], [], []
    for X, y in jobs.inject_faults(itertools.islice(batches, max_steps), rank):
        start = time.perf_counter()
        with autograd.record():
            l = loss(net(X), y)
        l.backward()
        losses.append(float(l.mean().asscalar()))
        nd.waitall()
        middle = time.perf_counter()
        trainer.step(global_batch if step_batch == 'global' else batch_size)
        nd.waitall()
        compute_s.append(middle - start)
        step_s.append(time.perf_counter() - middle)
    values = [p.data().asnumpy() for p in params.values()]
    return dict(params=values, names=list(params), rank=rank, num_workers=workers,
                kvstore=kvstore, steps=len(losses), global_batch=global_batch, losses=losses,
                compute_s=compute_s, step_s=step_s, lr=lr, step_batch=step_batch,
                param_bytes=sum(v.nbytes for v in values))


def save_result(result, folder):
    """Write a :func:`train` result to ``folder`` as ``<name>.npz`` (the parameters) and
    ``<name>.json`` (the path returned), ``name``: ``worker-<rank>`` or ``single``."""
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, 'single' if result['rank'] is None else f'worker-{result["rank"]}')
    np.savez(path + '.npz', *result['params'])
    with open(path + '.json', 'w') as f:
        json.dump({k: v for k, v in result.items() if k != 'params'}, f)
    return f.name


def load_result(folder, name):
    """The :func:`train` result that :func:`save_result` wrote (``name``: ``'worker-0'`` ...)."""
    path = os.path.join(folder, name)
    with open(path + '.json') as f, np.load(path + '.npz') as z:
        return dict(json.load(f), params=[z[f'arr_{i}'] for i in range(len(z.files))])


def _parser():
    p = argparse.ArgumentParser(prog='python -m d2lzh.mxnet.dist', description='Every process '
                                'of an MXNet parameter-server job (role from $DMLC_ROLE); workers '
                                'train LeNet. Start it with python -m d2lzh.mxnet.launch.')
    add = p.add_argument
    add('--kvstore', default='dist_sync', choices=['dist_sync', 'dist_async'])
    add('--batch-size', type=int, default=64, help='examples per worker and step')
    add('--epochs', type=int, default=1)
    add('--max-steps', type=int, help='stop after this many steps')
    add('--lr', type=float, default=0.1, help='SGD learning rate')
    add('--max-examples', default='2048', help="first N training images, or 'all'")
    add('--seed', type=int, default=0)
    add('--step-batch', default='global', choices=STEP_BATCHES, help='trainer.step gets --batch-'
        'size x workers (global, correct) or --batch-size (local: a mistake, shown on purpose)')
    add('--data-dir', help='folder searched first for Fashion-MNIST (on a cluster a shared one: '
        '$D2LZH_DATA_DIR does not travel through ssh)')
    add('--workers', type=int, default=1,
        help='without DMLC_ROLE: train alone on the combined batch of this many workers')
    add('--out', help='folder for worker-<rank>.npz/.json')
    add('--timeout', type=float, default=float(os.environ.get(TIMEOUT_ENV) or 0),
        help=f'end this process after this many seconds (default ${TIMEOUT_ENV}; 0: never)')
    add('--fault', metavar='KIND:RANK:STEP', help=f'sets ${jobs.FAULT_ENV}: raise:1:3 makes worker '
        'rank 1 raise before its minibatch 3 (from 0), kill:1:3 SIGKILLs it')
    return p


def main(argv=None):
    """Returns 0. A failing worker prints its traceback, records it in its status file and
    leaves with ``os._exit(1)``: a normal exit would wait for lost peers."""
    args = _parser().parse_args(argv)
    if args.fault is not None:
        try:
            os.environ[jobs.FAULT_ENV] = str(jobs.Fault.parse(args.fault) or '')
        except ValueError as err:
            raise SystemExit(f'--fault: {err}') from None
    role = os.environ.get('DMLC_ROLE')
    if role not in (None, *ROLES):
        raise SystemExit(f'DMLC_ROLE={role!r} 无效：请用 {"、".join(ROLES)} 之一')
    os.environ.pop('PORT', None)  # ps-lite would bind every process to $PORT
    jobs.watch(args.timeout, role or '进程', on_deadline=lambda why: write_status(error=why))
    if role in ('scheduler', 'server'):
        import_mxnet()  # runs the loop, then exits the process
        return 0
    try:
        r = train(kvstore=args.kvstore if role else None, batch_size=args.batch_size,
                  num_workers=None if role else args.workers, epochs=args.epochs,
                  max_steps=args.max_steps, lr=args.lr, max_examples=args.max_examples,
                  seed=args.seed, root=args.data_dir, step_batch=args.step_batch)
        if args.out:
            save_result(r, args.out)
        if r['steps']:
            mistake = (f'（trainer.step({args.batch_size})：--step-batch local）'
                       if args.step_batch == 'local' else '')
            who = (f'工作进程 rank {r["rank"]}（共 {r["num_workers"]} 个）' if role
                   else f'单个进程（代替 {r["num_workers"]} 个工作进程）')
            print(f'[{PREFIX}] {who}：{r["steps"]} 步，全局批量 '
                  f'{r["global_batch"]}{mistake}，最后的损失 {r["losses"][-1]:.4f}，用时中位数：'
                  f'计算 {np.median(r["compute_s"]) * 1e3:.1f} ms + trainer.step '
                  f'{np.median(r["step_s"]) * 1e3:.1f} ms', flush=True)
    except BaseException as err:
        if role != 'worker':
            raise
        print(f'[{PREFIX}] 工作进程（pid {os.getpid()}）出错：\n{traceback.format_exc()}',
              file=sys.stderr, flush=True)
        write_status(error=f'{type(err).__name__}: {err}')
        os._exit(1)
    return 0


if __name__ == '__main__':
    sys.exit(main())
