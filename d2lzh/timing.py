"""Timers shared by both editions (book section 8.2 defines ``Benchmark``)."""
import statistics
import time
from collections import namedtuple


class Benchmark:  #@save
    """Time the code inside a ``with`` block (book 8.2): on exit print ``'<prefix> time: 0.1234
    sec'`` as d2lzh 1.0 does and keep the seconds in ``.elapsed``. ``prefix``: str or None. It
    does not wait for asynchronous work: end the block with ``nd.waitall()`` (or another sync
    point) to time the computation rather than its launch."""

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
    """Wall-clock intervals, seconds: ``start()``, ``stop()`` (the length), ``times`` (all of
    them). It does not synchronise: call the framework's sync point before ``stop()``."""

    def __init__(self):
        self.times = []
        self._start = None

    def start(self):
        """Start an interval."""
        self._start = time.perf_counter()

    def stop(self):
        """End the interval and return its length, seconds. RuntimeError: no ``start()`` first."""
        if self._start is None:
            raise RuntimeError('调用 Timer.stop() 之前没有调用 Timer.start()：请先调用 start()')
        self.times.append(time.perf_counter() - self._start)
        self._start = None
        return self.times[-1]


def format_ratio(value):
    """A ratio as text: 2 decimals, up to 4 where a value other than 1 would read 1.00
    (0.997 for a run 0.3 % slower), and 0.9999 rather than 1.0000 for 0.99996."""
    digits = 2
    while digits < 4 and value != 1 and f'{value:.{digits}f}' == f'{1:.{digits}f}':
        digits += 1
    text = f'{value:.{digits}f}'
    if value != 1 and text == f'{1:.{digits}f}':
        text = f'{(1 - 10 ** -digits) if value < 1 else (1 + 10 ** -digits):.{digits}f}'
    return text


#: Faster or slower only when every repeat lies on one side of 1 and the median is this far
#: from 1; nearer is noise, in one wording, so a verdict does not flip between two runs.
NOISE = 0.1
VERDICTS = {1: '快了', -1: '反而慢了', 0: '测不出明显差别'}


def direction(median, low, high):
    """+1 (faster), -1 (slower) or 0 (no clear difference: :data:`VERDICTS`) for a ratio
    ``median`` in ``low`` .. ``high``, by the rule of :data:`NOISE`."""
    if low > 1 and median >= 1 + NOISE:
        return 1
    if high < 1 and median <= 1 / (1 + NOISE):
        return -1
    return 0


class Speedup(namedtuple('Speedup', 'median low high repeats')):
    """A speed-up over paired repeats (beyond the book): the median of the ratios ``baseline /
    faster``, their range ``low`` .. ``high``, ``direction`` and ``str()``: one Chinese
    sentence that states a direction only where ``direction`` does."""

    @property
    def direction(self):
        """See :func:`direction`."""
        return direction(self.median, self.low, self.high)

    def ratio_text(self):
        """The ratio and its spread, no verdict: '0.95（3 次重复的中位数，范围 0.90–1.02）', for a
        ratio whose direction the load decides (CPU contexts sharing cores) and would flip."""
        return f'{format_ratio(self.median)}（{self._spread()}）'

    def _spread(self):
        return f'{self.repeats} 次重复的中位数，范围 {format_ratio(self.low)}–{format_ratio(self.high)}'

    def __str__(self):
        median, spread = format_ratio(self.median), self._spread()
        if self.direction > 0:
            return f'{VERDICTS[1]} {median} 倍（{spread}）'
        if self.direction < 0:
            return f'{VERDICTS[-1]}：只有原来的 {median} 倍速度（{spread}）'
        return f'{VERDICTS[0]}（比值 {median}，{spread}；差别不到 {NOISE:.0%} 或方向不一，算作噪声）'


def speedup(baseline, faster):
    """The :class:`Speedup` (median, low, high of the ratios ``baseline[i] / faster[i]``) of
    ``faster`` over ``baseline``: lists of seconds of the same work, repeat i of each measured
    one after the other (so that both see the same state of the machine). ValueError: the
    lists are empty, differ in length, or hold a time <= 0."""
    if not baseline or len(baseline) != len(faster) or min(*baseline, *faster) <= 0:
        raise ValueError(f'speedup：请给两个等长、非空、只含正数的时间列表，收到的是 '
                         f'{len(baseline)} 个和 {len(faster)} 个值')
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
