"""d2lzh.plot: the charts the notebooks draw, the timeline from real profiler traces."""
import json
import os
import subprocess
import sys

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
    assert len(labels) >= 1 and ax.get_xlabel() == '毫秒' and ax.get_title() == 'two CPU contexts'
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
    with pytest.raises(ValueError, match='没有计时的事件'):
        plot.timeline(path, rows=lambda label: False)


def test_bar_chart_needs_one_label_per_value():
    ax = plot.bar_chart(['a', 'b'], [1.0, 2.0], 'seconds', title='t')
    assert [t.get_text() for t in ax.get_xticklabels()] == ['a', 'b']
    with pytest.raises(ValueError, match='请给每个值一个标签'):
        plot.bar_chart(['a'], [1.0, 2.0], 'seconds')


# Draws a chart with Chinese labels in a fresh interpreter where matplotlib knows no system
# font (only its own DejaVu fonts, as on a fresh cloud runtime or a GPU machine): prints the
# font of the title and every warning matplotlib gave while drawing.
_DRAW_WITHOUT_SYSTEM_FONTS = """
import sys, warnings
import matplotlib
matplotlib.use('Agg')
from matplotlib import font_manager
font_manager.fontManager.ttflist = [f for f in font_manager.fontManager.ttflist
                                    if 'mpl-data' in f.fname]
from d2lzh import plot
if sys.argv[1] == 'without-d2lzh-font':
    plot.font_file = lambda: None
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter('always')
    ax = plot.bar_chart(['混合前', '混合后'], [1.0, 0.4], '秒', title='调用 1000 次的时间')
    ax.figure.canvas.draw()
print(font_manager.FontProperties(family=matplotlib.rcParams['font.sans-serif'][0]).get_name())
print(font_manager.findfont(ax.title.get_fontproperties()))
for w in caught:
    print('WARNING', w.message)
"""


def _draw_without_system_fonts(tmp_path, mode):
    env = dict(os.environ, MPLCONFIGDIR=str(tmp_path / 'mplconfig'))
    done = subprocess.run([sys.executable, '-c', _DRAW_WITHOUT_SYSTEM_FONTS, mode], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_charts_draw_chinese_with_every_system_font_hidden(tmp_path):
    """d2lzh's own font (mpl-font's WenQuanYi Micro Hei) is registered and used: no glyph is
    missing although matplotlib sees no system font."""
    out = _draw_without_system_fonts(tmp_path, 'with-d2lzh-font')
    assert 'missing from' not in out, out
    assert plot.font_file() in out and 'WenQuanYi Micro Hei' in out, out


def test_without_a_chinese_font_the_glyphs_are_missing_and_d2lzh_says_how_to_fix(tmp_path):
    """The check above can fail: without d2lzh's font matplotlib warns of missing glyphs, and
    d2lzh names the package that fixes it."""
    out = _draw_without_system_fonts(tmp_path, 'without-d2lzh-font')
    assert 'missing from' in out and 'pip install mpl-font==' in out, out


@pytest.mark.parametrize('name, label', [
    ('void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctorOnSelf_add<float>, '
     'at::detail::Array<char*, 2> >(int, at::native::CUDAFunctorOnSelf_add<float>, '
     'at::detail::Array<char*, 2>)', '逐元素：加法'),
    ('sm90_xmma_gemm_f32f32_tf32f32_f32_tn_n_tilesize128x128x32_warpgroupsize1x1x1_execute_'
     'segment_k_off_kernel__5x_cublas', '矩阵乘法'),
    ('void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, '
     'at::native::func_wrapper_t<float, at::native::sum_functor<float, float, float>', '归约（求和等）'),
    ('Memcpy HtoD (Pageable -> Device)', '复制：主机→GPU'),
    ('Memcpy DtoH (Device -> Pinned)', '复制：GPU→主机'),
    ('ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)', 'NCCL 通信'),
    ('void cudnn::bn_fw_tr_1C11_kernel_NCHW<float, float, int, 512, true, 1>', '批量归一化'),
    ('aten::add', 'aten::add'), ('dot', 'dot'), ('cudaLaunchKernel', 'cudaLaunchKernel'),
    ('void at::native::(anonymous namespace)::some_kernel<int>', 'some_kernel'),
])
def test_short_name_says_what_a_kernel_does(name, label):
    assert plot.short_name(name) == label


def test_timeline_leaves_out_the_profilers_own_rows_and_names_kernels_shortly():
    kernel = ('void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctorOnSelf_add'
              '<float>, at::detail::Array<char*, 2> >(int, at::native::CUDAFunctorOnSelf_add<float>)')
    trace = {'traceEvents': [
        {'ph': 'M', 'name': 'process_name', 'pid': 1, 'args': {'name': 'python'}},
        {'ph': 'X', 'name': 'aten::add', 'ts': 0, 'dur': 5, 'pid': 1, 'tid': 1},
        {'ph': 'X', 'name': kernel, 'cat': 'kernel', 'ts': 3, 'dur': 4, 'pid': 0, 'tid': 7},
        {'ph': 'X', 'name': 'Activity Buffer Request', 'cat': 'overhead', 'ts': 0, 'dur': 9,
         'pid': -1, 'tid': 0},
        {'ph': 'X', 'name': 'span', 'ts': 0, 'dur': 9, 'pid': -2, 'tid': 0}]}
    ax = plot.timeline(trace)
    rows = [t.get_text() for t in ax.get_yticklabels()]
    assert len(rows) == 2 and not any('-1' in r or '-2' in r for r in rows), rows
    assert sorted(t.get_text() for t in ax.get_legend().get_texts()) == ['aten::add', '逐元素：加法']
