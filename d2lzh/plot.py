"""Matplotlib helpers for the notebooks' charts (both editions), labelled in Chinese.

The Chinese font travels with d2lzh: WenQuanYi Micro Hei (文泉驿微米黑, the face of Debian's
``fonts-wqy-microhei``) from the pinned dependency ``mpl-font`` (pyproject.toml says why),
registered with matplotlib by every helper here, so that no system font is needed: a fresh
cloud runtime or a GPU machine without fonts draws Chinese, not boxes.
"""
import importlib.util
import json
import os
import re
import warnings

_CJK_FONTS = ('WenQuanYi Micro Hei', 'WenQuanYi Zen Hei', 'Noto Sans CJK SC', 'Noto Sans SC',
              'Source Han Sans SC', 'SimHei', 'Microsoft YaHei', 'PingFang SC', 'Heiti SC')


def font_file():
    """Path (str) of the Chinese font file that d2lzh registers: WenQuanYi Micro Hei as the
    package ``mpl-font`` installs it, or None where that package is missing."""
    spec = importlib.util.find_spec('mpl_font')  # found, not imported: its modules set rcParams
    for folder in (spec.submodule_search_locations or []) if spec else []:
        path = os.path.join(folder, 'fonts', 'wqy', 'wqy-microhei.ttc')
        if os.path.isfile(path):
            return path
    return None


def _use_chinese_font():
    """Register d2lzh's Chinese font (:func:`font_file`) and put the first Chinese font that
    matplotlib knows first in its sans-serif list. Without any, warn once with the fix."""
    import matplotlib
    from matplotlib import font_manager
    names = {f.name for f in font_manager.fontManager.ttflist}
    path = font_file()
    if path and 'WenQuanYi Micro Hei' not in names:
        font_manager.fontManager.addfont(path)
        names = {f.name for f in font_manager.fontManager.ttflist}
    found = [f for f in _CJK_FONTS if f in names]
    if found:
        fonts = matplotlib.rcParams['font.sans-serif']
        matplotlib.rcParams['font.family'] = ['sans-serif']
        matplotlib.rcParams['font.sans-serif'] = [found[0]] + [f for f in fonts if f != found[0]]
        matplotlib.rcParams['axes.unicode_minus'] = False
    else:
        warnings.warn('d2lzh.plot：没有中文字体，图中的中文会显示成方框；安装 d2lzh 用的字体：'
                      'pip install mpl-font==1.1.0', stacklevel=3)


def set_figsize(figsize=(5.0, 3.0)):
    """Set the default figure size in inches (book 3.1) and select a Chinese font; call it
    before drawing with matplotlib directly."""
    import matplotlib.pyplot as plt
    _use_chinese_font()
    plt.rcParams['figure.figsize'] = figsize


def bar_chart(labels, values, ylabel, title=None, fmt='{:.3g}', ax=None):
    """Draw a bar per measured value (list of float, in the unit that ``ylabel`` names, e.g.
    ``'秒'``) with its ``labels`` (list of str) and the value printed on it by ``fmt``, into
    ``ax`` (a new figure if None); return the Axes. ValueError: ``labels`` and ``values``
    differ in length or are empty."""
    import matplotlib.pyplot as plt
    _use_chinese_font()
    if len(labels) != len(values) or not labels:
        raise ValueError(f'bar_chart：{len(labels)} 个标签对应 {len(values)} 个值，'
                         '请给每个值一个标签（至少一个值）')
    if ax is None:
        _, ax = plt.subplots()
    bars = ax.bar(range(len(values)), values, color='tab:blue')
    ax.set_xticks(range(len(values)))
    ax.set_xticklabels(labels)
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title)
    for bar, value in zip(bars, values):
        ax.annotate(fmt.format(value), (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                    ha='center', va='bottom')
    return ax


# What a GPU kernel or profiler event does, found in its (often 150-character C++) name: the
# first rule whose words occur in the lower-cased name gives the legend's label.
_WHAT_IT_DOES = ((('memcpy htod', 'memcpy h2d'), '复制：主机→GPU'),
                 (('memcpy dtoh', 'memcpy d2h'), '复制：GPU→主机'),
                 (('memcpy dtod', 'memcpy d2d', 'memcpy ptop', 'memcpy p2p'), '复制：GPU→GPU'),
                 (('memset',), '内存置零'), (('nccl',), 'NCCL 通信'),
                 (('batch_norm', 'batchnorm', 'bn_fw', 'bn_bw'), '批量归一化'),
                 (('conv', 'cudnn'), '卷积'), (('gemm', 'xmma', 'cutlass', 'cublas'), '矩阵乘法'),
                 (('reduce',), '归约（求和等）'), (('copy',), '复制（核函数）'), (('fill',), '填充'))
_FUNCTOR_OPS = {'add': '加法', 'mul': '乘法', 'sub': '减法', 'div': '除法', 'fill': '填充',
                'exp': '指数', 'tanh': 'tanh', 'relu': 'ReLU', 'sigmoid': 'sigmoid', 'gelu': 'GELU'}


def short_name(name, width=28):
    """A legend's label for a profiler event ``name`` (str): a CUDA kernel named by what it
    does (``'void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctorOnSelf_add
    <float>, ...>'`` -> ``'逐元素：加法'``; cuBLAS kernels -> ``'矩阵乘法'``; copies with their
    direction), an operator's short name kept (``'aten::add'``), anything else the last part of
    its C++ name, cut to ``width`` characters (beyond the book)."""
    low = name.lower()
    if low.startswith('void ') or any(w in low for w in ('kernel', 'memcpy', 'memset', 'nccl',
                                                         'gemm', 'xmma', 'cutlass')):
        for words, label in _WHAT_IT_DOES:
            if any(w in low for w in words):
                return label
        if 'elementwise' in low or 'functor' in low:
            op = next((zh for key, zh in _FUNCTOR_OPS.items()
                       if f'_{key}' in low or f'{key}functor' in low or f'{key}_kernel' in low), None)
            return f'逐元素：{op}' if op else '逐元素运算'
    base = name.replace('(anonymous namespace)::', '').removeprefix('void ')
    base = name if name.startswith('aten::') else \
        base.split('<')[0].split('(')[0].strip().split('::')[-1].lstrip('_') or name
    return base if len(base) <= width else base[:width - 1] + '…'


def events(trace):
    """Every timed event of ``trace`` (a parsed dict or a file's path) as ``(start us, end us,
    pid, tid, name, cat)``, sorted by start: complete events (``ph`` 'X') and matched begin/end
    pairs ('B'/'E' by pid, tid and name; MXNet's API calls 'b'/'e' also by id)."""
    out, open_ = [], {}
    for e in sorted(load_trace(trace)['traceEvents'], key=lambda e: e.get('ts', 0)):
        key = (e.get('pid'), e.get('tid'), e.get('name'), e.get('id'))
        if e.get('ph') == 'X' and 'dur' in e:
            out.append((e['ts'], e['ts'] + e['dur'], *key[:3], e.get('cat')))
        elif e.get('ph') in ('B', 'b'):
            open_[key] = e['ts']
        elif e.get('ph') in ('E', 'e') and key in open_:
            out.append((open_.pop(key), e['ts'], *key[:3], e.get('cat')))
    return sorted(out)


def load_trace(trace):
    """A Chrome trace: ``trace`` itself if parsed (dict), else the JSON file at that path."""
    if isinstance(trace, dict):
        return trace
    with open(trace, encoding='utf-8') as f:
        return json.load(f)


def timeline(trace, ax=None, title=None, rows=None, legend=6, colours=None):
    """Draw a profiler's Chrome trace as a timeline and return the Axes (beyond the book).

    One row per process/thread of the trace (an MXNet device and engine thread, a PyTorch thread or
    CUDA stream), its operators as bars on a time axis in milliseconds, so that what runs at the
    same time is seen side by side. ``trace``: what ``mx.profiler.dump()`` or ``torch.profiler``'s
    ``export_chrome_trace`` write (parsed, or the file's path; read by :func:`events`; it also
    opens in ui.perfetto.dev). ``ax``: draw there (None: a new figure); ``rows(label) -> bool``
    keeps the rows it accepts; the ``legend`` most frequent operations get a colour and a legend
    entry, named by :func:`short_name` (``colours``: another panel's ``ax.timeline_colours``); the
    profiler's records about itself are left out. ValueError: the trace holds no timed event.
    """
    from collections import Counter, defaultdict

    import matplotlib.pyplot as plt

    _use_chinese_font()
    trace, names, bars = load_trace(trace), {}, defaultdict(list)
    for e in trace['traceEvents']:
        if e.get('ph') == 'M' and e.get('name') in ('process_name', 'thread_name'):
            names[(e['pid'], None if e['name'] == 'process_name' else e.get('tid'))] = \
                str(e.get('args', {}).get('name', ''))
    for start, end, pid, tid, name, cat in events(trace):  # less the profiler's own records
        if cat not in ('overhead', 'Trace') and 'Activity Buffer' not in name:
            bars[(pid, tid)].append((start, end - start, short_name(name)))
    label = {k: re.sub(r'\bstream (\d+)', r'CUDA 流 \1', re.sub(r'\bthread (\d+)', r'线程 \1', ' '.join(
        filter(None, (names.get((k[0], None)), names.get(k)))))) or f'{k[0]}/{k[1]}' for k in bars}
    for text in set(label.values()):  # several threads of one process: number them
        same = sorted(k for k in label if label[k] == text)
        for i, k in enumerate(same if len(same) > 1 else []):
            label[k] = f'{text} #{i + 1}'
    keys = sorted((k for k in bars if not label[k].startswith(('Spans', 'PyTorch Profiler'))
                   and (rows is None or rows(label[k])) and not (isinstance(k[0], int) and k[0] < 0)),
                  key=lambda k: label[k])
    if not keys:
        raise ValueError('timeline：trace 里没有计时的事件，请传入含 X 或成对 B/E 事件的 trace')
    t0 = min(ts for k in keys for ts, _, _ in bars[k])
    common = [n for n, _ in Counter(n for k in keys for _, _, n in bars[k]).most_common(legend)]
    colours = colours or {n: f'C{i}' for i, n in enumerate(common)}
    if ax is None:
        _, ax = plt.subplots(figsize=(8, 0.5 + 0.45 * len(keys)))
    span = max(ts + dur for k in keys for ts, dur, _ in bars[k]) - t0  # a bar's least width
    for row, k in enumerate(keys):
        ax.broken_barh([((ts - t0) / 1e3, max(dur, span / 800) / 1e3) for ts, dur, _ in bars[k]],
                       (row - 0.4, 0.8), edgecolor='white', linewidth=0.3,
                       facecolors=[colours.get(n, 'lightgray') for _, _, n in bars[k]])
    ax.set_yticks(range(len(keys)))
    ax.set_yticklabels([label[k] for k in keys])
    ax.set_xlabel('毫秒')
    ax.legend(handles=[plt.Rectangle((0, 0), 1, 1, color=c) for c in colours.values()],
              labels=list(colours), fontsize='small', loc='upper left',
              bbox_to_anchor=(1.01, 1))
    if title:
        ax.set_title(title)
    ax.timeline_colours = colours
    return ax
