"""What both editions' distributed workers share (beyond the book; no framework here): the one
sharding rule (:func:`batch_indices`), a worker's deadline and launcher watch (:func:`watch`:
ps-lite never notices a dead peer, and torchrun's workers would run on as orphans if
``torchrun`` were killed), and the test seam that makes one worker fail on purpose
(:func:`inject_faults`: it wraps the data iterator from outside; no loop knows of it).
"""
import os
import signal
import sys
import threading
import time
from collections import namedtuple

import numpy as np

#: pid of the launcher on this machine; its workers end when it is gone.
LAUNCHER_PID_ENV = 'D2LZH_LAUNCHER_PID'
#: ``KIND:RANK:STEP``: worker ``RANK`` fails before its minibatch number ``STEP``.
FAULT_ENV = 'D2LZH_FAULT'


def batch_indices(num_examples, batch_size, world_size, rank, epoch, seed):
    """Which examples worker ``rank`` (0 .. world_size-1; None: all, the one-process
    reference) trains on at each step of ``epoch``: step t's global minibatch is the t-th run of
    ``batch_size * world_size`` examples of the permutation ``RandomState(seed + epoch)``, and
    worker ``rank`` takes its ``rank``-th slice of ``batch_size``. Like ``DistributedSampler``
    with ``drop_last=True``, but cut per step, so that W workers with minibatch B see exactly
    the examples of one process with minibatch W*B. Returns a list of int64 index arrays, one
    per step (an incomplete last global minibatch is dropped). ValueError: fewer examples than
    one global minibatch, or a bad rank."""
    global_batch = batch_size * world_size
    steps = num_examples // global_batch
    if steps < 1:
        raise ValueError(f'{num_examples} 个训练样本凑不满一个全局小批量（{batch_size} × '
                         f'{world_size} 个工作进程 = {global_batch} 个）：请用更多样本'
                         '（--max-examples）或更小的 --batch-size')
    if rank is not None and not 0 <= rank < world_size:
        raise ValueError(f'rank={rank} 无效：请用 0..{world_size - 1} 中的一个')
    order = np.random.RandomState(seed + epoch).permutation(num_examples)
    lo, hi = (0, global_batch) if rank is None else (rank * batch_size, (rank + 1) * batch_size)
    return [order[t * global_batch + lo:t * global_batch + hi] for t in range(steps)]


def _alive(pid):
    """Whether process ``pid`` exists and is not a zombie."""
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


def watch(timeout, who, on_deadline=None, interval=0.5):
    """End this process ``timeout`` seconds from now (None or <= 0: never), or as soon as its
    launcher has gone: its parent changed (re-parented), or ``$D2LZH_LAUNCHER_PID`` no longer
    runs. A daemon thread (returned) looks every ``interval`` s and calls ``os._exit`` after
    printing why, naming ``who`` (``'worker rank 1'``), to stderr: 124 at the deadline (after
    ``on_deadline(message)``, e.g. to write a status file), 1 when orphaned."""
    parent = os.getppid()
    launcher = int(os.environ.get(LAUNCHER_PID_ENV) or 0) or None
    deadline = time.monotonic() + timeout if timeout and timeout > 0 else None

    def run():
        while True:
            time.sleep(interval)
            if deadline is not None and time.monotonic() > deadline:
                message = f'{who}（pid {os.getpid()}）：已过 {timeout:g} 秒的期限，退出'
                print(message, file=sys.stderr, flush=True)
                if on_deadline is not None:
                    on_deadline(message)
                os._exit(124)
            if os.getppid() != parent or (launcher is not None and not _alive(launcher)):
                print(f'{who}（pid {os.getpid()}）：它的启动器（pid {launcher or parent}）已经'
                      '不在了，退出', file=sys.stderr, flush=True)
                os._exit(1)

    thread = threading.Thread(target=run, name='d2lzh-watch', daemon=True)
    thread.start()
    return thread


class Fault(namedtuple('Fault', 'kind rank step')):
    """A failure to inject: worker ``rank`` fails before its minibatch number ``step``
    (counted from 0 over the whole run), by raising RuntimeError (``kind='raise'``) or by
    SIGKILL to itself (``kind='kill'``)."""

    @classmethod
    def parse(cls, text):
        """``'KIND:RANK:STEP'`` (e.g. ``'kill:1:3'``) -> Fault; None or '' -> None. ValueError:
        the text is not of that form (the message shows one that is)."""
        if not text:
            return None
        kind, *numbers = text.split(':')
        if kind not in ('raise', 'kill') or [n.isdigit() for n in numbers] != [True, True]:
            raise ValueError(f'fault={text!r} 无效：请用 KIND:RANK:STEP 的形式，KIND 为 raise 或 '
                             'kill，例如 kill:1:3（rank 为 1 的工作进程，在它的第 4 个小批量'
                             '之前）')
        return cls(kind, *map(int, numbers))

    def __str__(self):
        return f'{self.kind}:{self.rank}:{self.step}'

    def strike(self):
        """Fail now, as ``kind`` says."""
        if self.kind == 'kill':
            os.kill(os.getpid(), signal.SIGKILL)
        raise RuntimeError(f'工作进程 rank {self.rank} 在第 {self.step + 1} 个小批量之前故意失败'
                           f'（{FAULT_ENV}={self}）')


class _FaultyIter:
    """``data_iter`` whose ``fault`` strikes before minibatch ``fault.step``; every other
    attribute (``__len__``, ``set_epoch`` ...) is the wrapped iterator's."""

    def __init__(self, data_iter, fault):
        self._data_iter, self._fault, self._taken = data_iter, fault, 0

    def __getattr__(self, name):
        return getattr(self._data_iter, name)

    def __len__(self):
        return len(self._data_iter)

    def __iter__(self):
        for batch in self._data_iter:
            if self._taken == self._fault.step:
                self._fault.strike()
            self._taken += 1
            yield batch


def inject_faults(data_iter, rank, text=None):
    """The test seam: ``data_iter`` itself, or wrapped so that it fails as ``text`` (default
    ``$D2LZH_FAULT``) asks when ``rank`` is the rank named there. ValueError: a bad fault text."""
    fault = Fault.parse(os.environ.get(FAULT_ENV) if text is None else text)
    if fault is None or fault.rank != rank:
        return data_iter
    return _FaultyIter(data_iter, fault)
