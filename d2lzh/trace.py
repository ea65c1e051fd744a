"""Profiler traces as spans (beyond the book; 8.2 and 8.3 of both editions, framework-free).

A span is ``Span(start, end, row, name)``: microseconds on the trace's clock, the timeline row
it belongs to (a device and thread, or a CUDA stream) and the operator's name. The traces are
the Chrome-trace JSON files that ``mx.profiler.dump()`` and ``torch.profiler``'s
``export_chrome_trace`` write, read by :func:`d2lzh.plot.events`; :func:`draw` hands spans to
:func:`d2lzh.plot.timeline`.
"""
from collections import namedtuple

from .plot import events, load_trace as _load, timeline  # one parser of Chrome traces

Span = namedtuple('Span', 'start end row name')


def engine_ops(trace, names=('dot', 'Copy')):
    """MXNet (8.3): the operators whose names start with one of ``names``, as spans in rows
    ``'cpu/0 线程 k'`` (each device's engine threads numbered from 1 in order of first use)."""
    trace = _load(trace)
    devices, threads = {e['pid']: e['args']['name'] for e in trace['traceEvents']
                        if e.get('name') == 'process_name'}, {}
    return [Span(s, e, f'{devices[pid]} 线程 '
                 f'{threads.setdefault((pid, tid), 1 + sum(p == pid for p, _ in threads))}', n)
            for s, e, pid, tid, n, cat in events(trace) if cat == 'operator'
            and '/' in devices.get(pid, '') and n.startswith(tuple(names))]


def torch_ops(trace):
    """PyTorch (8.3): matrix products and copies on CPU threads (rows ``'CPU 线程 k'``,
    numbered in order of first use) and every kernel and copy on the GPU (``'cuda:i 流 s'``)."""
    threads, out = {}, []
    for s, e, pid, tid, name, cat in events(trace):
        if cat in ('kernel', 'gpu_memcpy'):
            out.append(Span(s, e, f'cuda:{pid} 流 {tid}',
                            '核函数' if cat == 'kernel' else name.split(' (')[0]))
        elif cat == 'cpu_op' and name in ('aten::mm', 'aten::copy_'):
            out.append(Span(s, e, f'CPU 线程 {threads.setdefault(tid, len(threads) + 1)}', name))
    return out


def overlap_ms(spans, key=lambda span: span.row):
    """Milliseconds during which spans of two or more different ``key``s (default: rows) ran
    at the same time, e.g. ``key=lambda s: s.name`` for two kinds of operator."""
    busy = {}
    for s in sorted(spans):  # merge each key's overlapping spans
        merged = busy.setdefault(key(s), [])
        if merged and s.start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], s.end)
        else:
            merged.append([s.start, s.end])
    edges = sorted((t, step) for m in busy.values() for a, b in m for t, step in ((a, 1), (b, -1)))
    running, total, last = 0, 0, None
    for t, step in edges:  # at equal times an end (-1) sorts first
        total += t - last if running > 1 else 0
        running, last = running + step, t
    return total / 1e3


def draw(spans, title, ax=None, **kwargs):
    """:func:`d2lzh.plot.timeline` of ``spans`` (one row per ``row``; ``kwargs`` go to it),
    9 inches wide; returns the Axes. ValueError: no spans."""
    rows = {s.row for s in spans}
    ax = timeline({'traceEvents': [{'ph': 'X', 'name': s.name, 'ts': s.start, 'dur': s.end - s.start,
                                    'pid': s.row, 'tid': 0} for s in spans] +
                   [{'ph': 'M', 'name': 'process_name', 'pid': r, 'args': {'name': r}} for r in rows]},
                  ax=ax, title=title, **kwargs)
    ax.figure.set_size_inches(9, ax.figure.get_size_inches()[1])
    return ax
