"""d2lzh.plot: the charts the notebooks draw, the timeline from real profiler traces."""
import json

import matplotlib
import pytest

matplotlib.use('Agg')

from d2lzh import plot  # noqa: E402


def _bars(ax):
    return sum(len(c.get_paths()) for c in ax.collections)


def test_timeline_of_an_mxnet_trace_has_a_row_per_engine_thread(tmp_path):
    import d2lzh  # noqa: F401  (prepares `import mxnet`)
    import mxnet as mx
    from mxnet import nd
    path = tmp_path / 'mx.json'
    mx.profiler.set_config(profile_all=True, filename=str(path))
    mx.profiler.set_state('run')
    a, b = nd.ones((200, 200), ctx=mx.cpu(0)), nd.ones((200, 200), ctx=mx.cpu(1))
    for _ in range(3):
        nd.dot(a, a), nd.dot(b, b)
    nd.waitall()
    mx.profiler.set_state('stop')
    mx.profiler.dump()
    events = json.loads(path.read_text())['traceEvents']
    dots = [e for e in events if e.get('name') == 'dot' and e.get('ph') == 'B']
    ax = plot.timeline(path, title='two CPU contexts')
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert len(labels) >= 1 and ax.get_xlabel() == 'ms' and ax.get_title() == 'two CPU contexts'
    assert _bars(ax) >= len(dots) == 6
    assert 'dot' in [t.get_text() for t in ax.get_legend().get_texts()]


def test_timeline_of_a_torch_trace_and_row_filter(tmp_path):
    torch = pytest.importorskip('torch')
    from torch.profiler import ProfilerActivity, profile
    x = torch.ones(200, 200)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(4):
            x @ x
    path = tmp_path / 'pt.json'
    prof.export_chrome_trace(str(path))
    ax = plot.timeline(json.loads(path.read_text()))
    assert _bars(ax) >= 4
    assert 'aten::matmul' in [t.get_text() for t in ax.get_legend().get_texts()]
    with pytest.raises(ValueError, match='no timed event'):
        plot.timeline(path, rows=lambda label: False)


def test_bar_chart_needs_one_label_per_value():
    ax = plot.bar_chart(['a', 'b'], [1.0, 2.0], 'seconds', title='t')
    assert [t.get_text() for t in ax.get_xticklabels()] == ['a', 'b']
    with pytest.raises(ValueError, match='one label per value'):
        plot.bar_chart(['a'], [1.0, 2.0], 'seconds')


def test_charts_use_an_installed_chinese_font(recwarn):
    from matplotlib import font_manager
    ax = plot.bar_chart(['混合前', '混合后'], [1.0, 0.4], '秒', title='调用 1000 次的时间')
    ax.figure.canvas.draw()
    names = {f.name for f in font_manager.fontManager.ttflist}
    if not names.intersection(plot._CJK_FONTS):
        pytest.skip('no Chinese font installed (apt-get install fonts-wqy-microhei)')
    assert matplotlib.rcParams['font.sans-serif'][0] in plot._CJK_FONTS
    assert not [w for w in recwarn if 'Glyph' in str(w.message)]
