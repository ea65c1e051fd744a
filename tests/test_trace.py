"""d2lzh.trace: spans of a Chrome trace, overlap between rows, a real MXNet trace's rows."""
import matplotlib

matplotlib.use('Agg')

from d2lzh import trace  # noqa: E402
from d2lzh.trace import Span  # noqa: E402


def test_events_pairs_begin_and_end_and_reads_complete_events():
    t = {'traceEvents': [
        {'ph': 'B', 'name': 'dot', 'pid': 0, 'tid': 1, 'ts': 10, 'cat': 'operator'},
        {'ph': 'X', 'name': 'k', 'pid': 0, 'tid': 7, 'ts': 5, 'dur': 3, 'cat': 'kernel'},
        {'ph': 'E', 'name': 'dot', 'pid': 0, 'tid': 1, 'ts': 30, 'cat': 'operator'},
        {'ph': 'E', 'name': 'lost', 'pid': 0, 'tid': 1, 'ts': 31}]}
    assert trace.events(t) == [(5, 8, 0, 7, 'k', 'kernel'), (10, 30, 0, 1, 'dot', 'operator')]


def test_overlap_counts_only_time_when_two_rows_are_busy():
    spans = [Span(0, 1000, 'a', 'x'), Span(500, 800, 'a', 'x'),   # one row overlapping itself
             Span(900, 2000, 'b', 'y'), Span(3000, 4000, 'b', 'y')]
    assert trace.overlap_ms(spans) == 0.1
    assert trace.overlap_ms(spans[:2]) == 0
    assert trace.overlap_ms(spans, key=lambda s: s.name) == 0.1


def test_engine_ops_numbers_threads_per_device_and_draws(tmp_path):
    t = {'traceEvents': [{'ph': 'M', 'name': 'process_name', 'pid': 0, 'args': {'name': 'cpu/0'}},
                         {'ph': 'M', 'name': 'process_name', 'pid': 9, 'args': {'name': 'operator'}}]}
    for tid, start in ((5, 0), (6, 100), (5, 300)):
        t['traceEvents'] += [{'ph': ph, 'name': 'dot', 'pid': pid, 'tid': tid, 'ts': ts,
                              'cat': 'operator'} for pid in (0, 9)
                             for ph, ts in (('B', start), ('E', start + 200))]
    spans = trace.engine_ops(t)
    assert [s.row for s in spans] == ['cpu/0 线程 1', 'cpu/0 线程 2', 'cpu/0 线程 1']
    assert trace.overlap_ms(spans) == 0.1  # 100-200 us; touching at 300 us is no overlap
    ax = trace.draw(spans, 'dot')
    assert [t.get_text() for t in ax.get_yticklabels()] == ['cpu/0 线程 1', 'cpu/0 线程 2']
