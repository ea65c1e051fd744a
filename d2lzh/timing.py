"""Timers shared by both editions (book section 8.2 defines ``Benchmark``)."""
import statistics
import time
from collections import namedtuple


class Benchmark:  #@save
    """Time the code inside a ``with`` block and print it (book 8.2).

    ``with Benchmark('label'):`` prints ``'label time: 0.1234 sec'`` on exit,
    like d2lzh 1.0. The block's wall-clock time, in seconds, stays available
    as ``.elapsed`` afterwards. The timer does not wait for asynchronous work:
    end the block with ``nd.waitall()`` (or another sync point) to time the
    computation rather than its launch.

    Args:
        prefix (str or None): label printed before ``time``.
    """

    def __init__(self, prefix=None):
        self.prefix = f'{prefix} ' if prefix else ''
        self.elapsed = None

    def __enter__(self):
        self._start = time.perf_counter()
        return self

    def __exit__(self, *exc_info):
        self.elapsed = time.perf_counter() - self._start
        print(f'{self.prefix}time: {self.elapsed:.4f} sec')


class Timer:
    """Collect wall-clock intervals, in seconds: ``start()``, ``stop()`` (returns the length),
    ``sum()``, ``avg()``, ``times``. Like ``Benchmark`` it does not synchronise: call the
    framework's sync point before ``stop()``."""

    def __init__(self):
        self.times = []
        self._start = None

    def start(self):
        """Start an interval."""
        self._start = time.perf_counter()

    def stop(self):
        """End the current interval and return its length in seconds.

        Raises:
            RuntimeError: ``start()`` was not called first.
        """
        if self._start is None:
            raise RuntimeError('Timer.stop() called before Timer.start()')
        self.times.append(time.perf_counter() - self._start)
        self._start = None
        return self.times[-1]

    def sum(self):
        """Total of all intervals, seconds."""
        return sum(self.times)

    def avg(self):
        """Mean interval, seconds (0.0 when there is none)."""
        return self.sum() / len(self.times) if self.times else 0.0


class Speedup(namedtuple('Speedup', 'median low high repeats')):
    """A speed-up over paired repeats (beyond the book): the median of the ratios ``baseline /
    faster``, their range ``low`` .. ``high``, and ``str()``: one Chinese sentence that never
    states a direction its spread does not support."""

    @property
    def measurable(self):
        """Whether every repeat points the same way (the range does not contain 1.0)."""
        return self.low > 1 or self.high < 1

    def __str__(self):
        spread = f'{self.repeats} 次重复的中位数，范围 {self.low:.2f}–{self.high:.2f}'
        if not self.measurable:
            return f'在这台机器上测不出差别（比值 {self.median:.2f}，{spread}，包含 1）'
        if self.low > 1:
            return f'快了 {self.median:.2f} 倍（{spread}）'
        return f'反而慢了：只有原来的 {self.median:.2f} 倍速度（{spread}）'


def speedup(baseline, faster):
    """The :class:`Speedup` (median, low, high of the ratios ``baseline[i] / faster[i]``) of
    ``faster`` over ``baseline``: lists of seconds of the same work, repeat i of each measured
    one after the other (so that both see the same state of the machine). ValueError: the
    lists are empty, differ in length, or hold a time <= 0."""
    if not baseline or len(baseline) != len(faster) or min(*baseline, *faster) <= 0:
        raise ValueError(f'speedup: give two equally long lists of positive times, got '
                         f'{len(baseline)} and {len(faster)} values')
    ratios = [b / f for b, f in zip(baseline, faster)]
    return Speedup(statistics.median(ratios), min(ratios), max(ratios), len(ratios))


def paired_times(fns, repeats=5):
    """Seconds of each function of ``fns`` ({name: function()}), all called one after the other,
    ``repeats`` times: {name: list of seconds}, repeat i of each measured next to the others
    (for :func:`speedup`). Each function must wait for its own work (synchronise)."""
    times = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
    return times
