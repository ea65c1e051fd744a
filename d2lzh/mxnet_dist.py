"""One program for every process of an MXNet parameter-server job (beyond the book).

Started by MXNet's own launcher for each role; ``DMLC_ROLE`` (set by the
launcher) says which one this process is:

* ``scheduler`` and ``server``: ``import mxnet`` runs ps-lite's scheduler or
  server loop inside MXNet and exits the process when the job ends;
* ``worker``: trains LeNet (the network of section 8.4, in Gluon) on its own
  shard of Fashion-MNIST with ``gluon.Trainer(..., kvstore='dist_sync')``
  (or ``dist_async``), as section 8.5 trains on several GPUs, and writes its
  final parameters and step times to ``--out``.

Run it through :mod:`d2lzh.mxnet_launch` (a deadline, and the whole job ends
when one process fails)::

    python -m d2lzh.mxnet_launch --host 127.0.0.1 --timeout 300 \\
        -n 2 -s 1 --launcher local python -m d2lzh.mxnet_dist --out build/dist

Without ``DMLC_ROLE`` (plain ``python -m d2lzh.mxnet_dist``) it trains in this
one process without a kvstore, on the combined batch of ``--workers`` workers:
the result the distributed job must reproduce.

``--step-batch local`` demonstrates a common mistake: every worker calls
``trainer.step(batch_size)`` instead of ``trainer.step(batch_size *
num_workers)``. The servers sum W workers' gradients, so dividing by the local
batch gives W times the mean gradient of the global batch: plain SGD (this
program's optimizer, no momentum, no weight decay) then trains exactly as one
process would with W times the learning rate. The default, ``global``, is the
correct call.

Every process guards itself too: it removes ``$PORT`` (ps-lite would bind
every process to that port), and a watchdog thread ends it after ``--timeout``
seconds or when its launcher has gone (ps-lite itself never notices a dead
peer and would wait forever).
"""
import argparse
import json
import os
import signal
import sys
import threading
import time
import traceback

import numpy as np

ROLES = ('scheduler', 'server', 'worker')
STEP_BATCHES = ('global', 'local')  # what trainer.step gets: batch_size * num_workers or batch_size
PREFIX = 'd2lzh.mxnet_dist'
# Set by d2lzh.mxnet_launch for each process it starts.
STATUS_ENV = 'D2LZH_DIST_STATUS'   # file this process writes its role/rank/error to
TIMEOUT_ENV = 'D2LZH_DIST_TIMEOUT'  # default of --timeout, seconds
LAUNCHER_ENV = 'D2LZH_DIST_LAUNCHER_PID'  # pid of the launcher on this machine


def _say(msg):
    print(f'[{PREFIX}] {msg}', file=sys.stderr, flush=True)


def write_status(**fields):
    """Merge ``fields`` into this process's status file (JSON), if the launcher gave one.

    The launcher reads it to name a failed process by its kvstore rank and to
    show its error. Returns None; never raises (a status file is a courtesy).
    """
    path = os.environ.get(STATUS_ENV)
    if not path:
        return
    try:
        old = {}
        if os.path.exists(path):
            with open(path) as f:
                old = json.load(f)
        old.update(fields)
        tmp = f'{path}.{os.getpid()}.tmp'
        with open(tmp, 'w') as f:
            json.dump(old, f)
        os.replace(tmp, path)
    except (OSError, ValueError):
        pass


def _alive(pid):
    """Whether process ``pid`` exists and is not a zombie (Linux: /proc; elsewhere: kill 0)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f'/proc/{pid}/stat') as f:
            return f.read().rsplit(')', 1)[1].split()[0] != 'Z'
    except (OSError, IndexError):
        return True


def start_watchdog(timeout, role):
    """End this process after ``timeout`` seconds, or as soon as its launcher has gone.

    The launcher has gone when this process's parent changes, or when the
    process named by ``$D2LZH_DIST_LAUNCHER_PID`` (set by
    :mod:`d2lzh.mxnet_launch` on its own machine) no longer runs: that also
    covers a launcher that died before this process could look at its parent.

    ps-lite has no failure detection: when a peer dies, the other processes
    block forever. This daemon thread makes sure none outlives its deadline
    or its launcher. It calls ``os._exit`` (exit code 124 on the deadline, 1
    when orphaned) after printing why.

    Args:
        timeout (float or None): seconds from now; None or <= 0: no deadline
            (the parent check still runs).
        role (str): used in the message.

    Returns:
        threading.Thread: the started daemon thread.
    """
    parent = os.getppid()
    launcher = int(os.environ.get(LAUNCHER_ENV) or 0) or None
    deadline = time.monotonic() + timeout if timeout and timeout > 0 else None

    def watch():
        while True:
            time.sleep(0.5)
            if deadline is not None and time.monotonic() > deadline:
                _say(f'{role} (pid {os.getpid()}): deadline of {timeout:g} s passed, exiting')
                write_status(error=f'deadline of {timeout:g} s passed')
                os._exit(124)
            if os.getppid() != parent or (launcher is not None and not _alive(launcher)):
                _say(f'{role} (pid {os.getpid()}): its launcher (pid {launcher or parent}) has '
                     'gone, exiting')
                os._exit(1)

    thread = threading.Thread(target=watch, name='d2lzh-watchdog', daemon=True)
    thread.start()
    return thread


# ------------------------------------------------------------------ training

def lenet():
    """LeNet as trained in section 8.4, written with Gluon layers.

    conv 3x3 (20) - ReLU - avg pool 2 - conv 5x5 (50) - ReLU - avg pool 2 -
    dense 128 - ReLU - dense 10.

    Returns:
        mxnet.gluon.nn.HybridSequential: input float32 (batch, 1, 28, 28),
        output float32 (batch, 10) logits; not initialized.
    """
    from mxnet.gluon import nn
    net = nn.HybridSequential()
    net.add(nn.Conv2D(20, kernel_size=3, activation='relu'),
            nn.AvgPool2D(pool_size=2, strides=2),
            nn.Conv2D(50, kernel_size=5, activation='relu'),
            nn.AvgPool2D(pool_size=2, strides=2),
            nn.Dense(128, activation='relu'),
            nn.Dense(10))
    return net


def batch_indices(num_examples, batch_size, num_workers, rank, epoch, seed):
    """Which examples worker ``rank`` uses at each step of one epoch.

    Every worker draws the same permutation (from ``seed`` and ``epoch``); step
    t's global batch is its ``t``-th run of ``batch_size * num_workers``
    examples, and worker ``rank`` takes the ``rank``-th slice of
    ``batch_size`` of it, its own shard. The last incomplete global batch is
    dropped, so all workers do the same number of steps.

    Args:
        num_examples (int): size of the training set.
        batch_size (int): examples per worker and step.
        num_workers (int): number of workers.
        rank (int or None): 0..num_workers-1, or None for the whole global batch.
        epoch (int), seed (int): select the permutation.

    Returns:
        list of numpy.ndarray: int64 index arrays, one per step.

    Raises:
        ValueError: fewer than one global batch of examples, or a bad rank.
    """
    global_batch = batch_size * num_workers
    steps = num_examples // global_batch
    if steps < 1:
        raise ValueError(f'{num_examples} training examples are fewer than one global batch of '
                         f'{batch_size} x {num_workers} workers = {global_batch}: use more '
                         'examples (--max-examples) or a smaller --batch-size')
    if rank is not None and not 0 <= rank < num_workers:
        raise ValueError(f'rank {rank} is not in 0..{num_workers - 1}')
    order = np.random.RandomState(seed + epoch).permutation(num_examples)
    out = []
    for t in range(steps):
        start = t * global_batch
        if rank is None:
            out.append(order[start:start + global_batch])
        else:
            out.append(order[start + rank * batch_size:start + (rank + 1) * batch_size])
    return out


def train(kvstore=None, batch_size=64, num_workers=None, epochs=1, max_steps=None, lr=0.1,
          max_examples=2048, seed=0, fault=None, on_start=None, root=None, step_batch='global'):
    """Train :func:`lenet` with ``gluon.Trainer``, alone or as one worker of a job.

    With a distributed kvstore (``'dist_sync'``, ``'dist_async'``) this process
    trains on its shard (chosen by ``kv.rank`` and ``kv.num_workers``) and
    calls ``trainer.step`` with the global batch size ``batch_size *
    num_workers``, so that the servers average the gradients over the global
    batch. Without one (None or ``'local'``) it trains on the whole global
    batch of ``num_workers`` workers in one process: the reference result.

    ``step_batch='local'`` makes it call ``trainer.step(batch_size)`` instead,
    the mistake of exercise 2 in notebook 07_distributed-training, in both
    modes alike: the sum of the gradients over ``batch_size * num_workers``
    examples is divided by ``batch_size``, W times the mean gradient. With
    this function's optimizer (plain SGD, no weight decay) that is exactly
    training with ``lr * num_workers`` (up to the rounding of the servers'
    sum); momentum would keep this exact, weight decay would not (its term
    ``lr * wd * weight`` grows with the learning rate but not with the
    gradient's divisor).

    Args:
        kvstore (str or None): kvstore type.
        batch_size (int): examples per worker and step.
        num_workers (int or None): workers the reference stands for; with a
            distributed kvstore it must be None or ``kv.num_workers``.
        epochs (int): passes over the training subset.
        max_steps (int or None): stop after this many steps in total (0: return
            the initial parameters).
        lr (float): SGD learning rate.
        max_examples (int or 'all'): first N Fashion-MNIST training images.
        seed (int): seeds parameter initialisation and the data order.
        fault (tuple or None): ``(mode, rank, step)`` to make worker ``rank``
            fail at ``step`` (mode ``'raise'``: a RuntimeError; ``'kill'``:
            SIGKILL to itself), to demonstrate the launcher's fault handling.
        on_start (callable or None): called with ``(kvstore_type, rank,
            num_workers)`` once the kvstore exists.
        root (str or None): folder searched first for Fashion-MNIST (see
            :func:`d2lzh.data.load_fashion_mnist`).
        step_batch (str): what ``trainer.step`` gets: ``'global'`` (default,
            correct): ``batch_size * num_workers``; ``'local'``: ``batch_size``,
            there only to show what that mistake does.

    Returns:
        dict: ``params`` (list of float32 numpy arrays in ``collect_params``
        order), ``names``, ``rank``, ``num_workers``, ``kvstore``, ``steps``,
        ``global_batch``, ``losses`` (mean training loss per step),
        ``compute_s`` and ``step_s`` (seconds per step: forward + backward,
        and ``trainer.step`` incl. communication, each synchronised),
        ``param_bytes`` (bytes of all parameters, float32), ``lr`` and
        ``step_batch`` (as given).

    Raises:
        ValueError: invalid sizes, an unknown ``step_batch``, or ``num_workers``
            disagrees with the kvstore.
        RuntimeError: the injected fault.
    """
    from ._compat import import_mxnet
    from .data import check_positive_int, load_fashion_mnist
    mx = import_mxnet()
    from mxnet import autograd, gluon, nd

    check_positive_int('batch_size', batch_size)
    check_positive_int('epochs', epochs)
    if step_batch not in STEP_BATCHES:
        raise ValueError(f'step_batch={step_batch!r} is not valid: use \'global\' (trainer.step '
                         'gets batch_size * num_workers, correct) or \'local\' (batch_size, to '
                         'show that mistake)')
    if max_steps is not None and (isinstance(max_steps, bool) or not isinstance(max_steps, int)
                                  or max_steps < 0):
        raise ValueError(f'max_steps={max_steps!r} is not valid: it must be a whole number >= 0 '
                         'or None')
    distributed = kvstore is not None and 'dist' in kvstore
    if distributed:
        kv = mx.kv.create(kvstore)
        rank, workers = kv.rank, kv.num_workers
        if num_workers not in (None, workers):
            raise ValueError(f'num_workers={num_workers} but the job has {workers} workers')
    else:
        kv = kvstore
        rank, workers = None, num_workers or 1
        check_positive_int('num_workers', workers)
    if on_start is not None:
        on_start(kvstore, rank, workers)

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
    step_size = global_batch if step_batch == 'global' else batch_size
    losses, compute_s, step_s = [], [], []
    step = 0
    for epoch in range(epochs):
        for idx in batch_indices(len(train_y), batch_size, workers, rank, epoch, seed):
            if max_steps is not None and step >= max_steps:
                break
            if fault is not None and fault[0] and rank == fault[1] and step == fault[2]:
                if fault[0] == 'kill':
                    os.kill(os.getpid(), signal.SIGKILL)
                raise RuntimeError(f'injected fault: worker rank {rank} fails at step {step}')
            X, y = nd.array(images[idx]), nd.array(train_y[idx])
            start = time.perf_counter()
            with autograd.record():
                l = loss(net(X), y)
            l.backward()
            losses.append(float(l.mean().asscalar()))
            nd.waitall()
            middle = time.perf_counter()
            trainer.step(step_size)
            nd.waitall()
            end = time.perf_counter()
            compute_s.append(middle - start)
            step_s.append(end - middle)
            step += 1
    values = [p.data().asnumpy() for p in params.values()]
    return {'params': values, 'names': list(params.keys()), 'rank': rank,
            'num_workers': workers, 'kvstore': kvstore, 'steps': step,
            'global_batch': global_batch, 'losses': losses, 'compute_s': compute_s,
            'step_s': step_s, 'param_bytes': int(sum(v.size for v in values) * 4), 'lr': lr,
            'step_batch': step_batch}


def save_result(result, folder):
    """Write a :func:`train` result to ``folder``: ``worker-<rank>.npz`` (the
    parameters, ``p0``, ``p1`` ...) and ``worker-<rank>.json`` (everything else).
    The single-process reference is saved as ``single``. Returns the JSON path."""
    os.makedirs(folder, exist_ok=True)
    name = 'single' if result['rank'] is None else f'worker-{result["rank"]}'
    np.savez(os.path.join(folder, name + '.npz'),
             **{f'p{i}': v for i, v in enumerate(result['params'])})
    meta = {k: v for k, v in result.items() if k != 'params'}
    path = os.path.join(folder, name + '.json')
    with open(path, 'w') as f:
        json.dump(meta, f)
    return path


def load_result(folder, name):
    """Read back what :func:`save_result` wrote (``name``: ``'worker-0'``,
    ``'single'`` ...). Returns the same dict as :func:`train`."""
    with open(os.path.join(folder, name + '.json')) as f:
        result = json.load(f)
    with np.load(os.path.join(folder, name + '.npz')) as z:
        result['params'] = [z[f'p{i}'] for i in range(len(z.files))]
    return result


def _parser():
    p = argparse.ArgumentParser(
        prog='python -m d2lzh.mxnet_dist',
        description='Every process of an MXNet parameter-server job (scheduler, server, worker; '
                    'from $DMLC_ROLE). Workers train LeNet on their shard of Fashion-MNIST. '
                    'Start it with python -m d2lzh.mxnet_launch.')
    p.add_argument('--kvstore', default='dist_sync', choices=['dist_sync', 'dist_async'],
                   help='kvstore of the workers (default dist_sync)')
    p.add_argument('--batch-size', type=int, default=64, help='examples per worker and step')
    p.add_argument('--epochs', type=int, default=1)
    p.add_argument('--max-steps', type=int, default=None, help='stop after this many steps')
    p.add_argument('--lr', type=float, default=0.1, help='SGD learning rate')
    p.add_argument('--max-examples', default='2048',
                   help="first N training images, or 'all' (default 2048)")
    p.add_argument('--seed', type=int, default=0)
    p.add_argument('--step-batch', default='global', choices=STEP_BATCHES,
                   help='what trainer.step gets: global = --batch-size x workers (default, '
                        'correct); local = --batch-size, a mistake shown on purpose: with plain '
                        'SGD it trains as if the learning rate were multiplied by the workers')
    p.add_argument('--data-dir', default=None,
                   help='folder searched first for Fashion-MNIST (on a cluster: a shared folder; '
                        '$D2LZH_DATA_DIR does not travel through the ssh launcher)')
    p.add_argument('--workers', type=int, default=1,
                   help='without DMLC_ROLE: train alone on the combined batch of this many workers')
    p.add_argument('--out', default=None, help='folder for worker-<rank>.npz/.json')
    p.add_argument('--timeout', type=float, default=float(os.environ.get(TIMEOUT_ENV) or 0),
                   help=f'end this process after this many seconds (default ${TIMEOUT_ENV}; '
                        '0: no deadline)')
    p.add_argument('--fault', default=None, metavar='MODE:RANK:STEP',
                   help="demonstrate a failure: 'raise:1:3' makes worker rank 1 raise at step 3, "
                        "'kill:1:3' SIGKILLs it")
    return p


def _parse_fault(text):
    if text is None:
        return None
    try:
        mode, rank, step = text.split(':')
        if mode not in ('raise', 'kill'):
            raise ValueError
        return mode, int(rank), int(step)
    except ValueError:
        raise SystemExit(f"--fault {text!r} is not valid: use MODE:RANK:STEP with MODE 'raise' "
                         "or 'kill', e.g. raise:1:3") from None


def main(argv=None):
    """Entry point of ``python -m d2lzh.mxnet_dist``; see the module docstring.

    Returns:
        int: 0 on success. A failing worker prints its traceback, records it
        in its status file and leaves with ``os._exit(1)``, because a normal
        exit would wait in ps-lite's shutdown barrier for peers that never come.
    """
    args = _parser().parse_args(argv)
    fault = _parse_fault(args.fault)
    role = os.environ.get('DMLC_ROLE')
    if role is not None and role not in ROLES:
        raise SystemExit(f'DMLC_ROLE={role!r} is not valid: it must be one of {", ".join(ROLES)}')
    if 'PORT' in os.environ:
        # ps-lite binds every non-scheduler process to $PORT when it is set.
        os.environ.pop('PORT')
    start_watchdog(args.timeout, role or 'process')
    write_status(role=role, pid=os.getpid())
    if role in ('scheduler', 'server'):
        from ._compat import import_mxnet
        import_mxnet()  # runs the scheduler/server loop, then exits the process
        return 0
    kvstore = args.kvstore if role == 'worker' else None
    try:
        result = train(kvstore=kvstore, batch_size=args.batch_size,
                       num_workers=None if role else args.workers, epochs=args.epochs,
                       max_steps=args.max_steps, lr=args.lr, max_examples=args.max_examples,
                       seed=args.seed, fault=fault, root=args.data_dir,
                       step_batch=args.step_batch,
                       on_start=lambda kv, rank, n: write_status(rank=rank, num_workers=n))
        if args.out:
            save_result(result, args.out)
        if not result['steps']:
            return 0
        compute, step = np.median(result['compute_s']), np.median(result['step_s'])
        who = 'single process' if result['rank'] is None else f'worker rank {result["rank"]}'
        mistake = (f' (trainer.step({args.batch_size}): --step-batch local)'
                   if args.step_batch == 'local' else '')
        print(f'[{PREFIX}] {who} of {result["num_workers"]}: {result["steps"]} steps, '
              f'global batch {result["global_batch"]}{mistake}, '
              f'final loss {result["losses"][-1]:.4f}, '
              f'median compute {compute * 1e3:.1f} ms + trainer.step {step * 1e3:.1f} ms',
              flush=True)
    except BaseException as err:  # noqa: B902 (report everything, then leave at once)
        if role != 'worker':
            raise
        _say(f'worker (pid {os.getpid()}) failed:\n{traceback.format_exc()}')
        write_status(error=f'{type(err).__name__}: {err}')
        sys.stderr.flush()
        os._exit(1)
    return 0


if __name__ == '__main__':
    sys.exit(main())
