"""Timers shared by both editions (book section 8.2 defines ``Benchmark``)."""
import time


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
    """Collect several wall-clock intervals, in seconds.

    ``start()`` begins an interval, ``stop()`` ends it and returns its length;
    ``sum()``, ``avg()`` and ``times`` give the totals. Like ``Benchmark`` it
    does not synchronise: call the framework's sync point before ``stop()``.
    """

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
