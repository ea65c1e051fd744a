"""Matplotlib helpers for the notebooks' charts (both editions), labelled in Chinese.

The Chinese font travels with d2lzh: WenQuanYi Micro Hei (文泉驿微米黑, the face of Debian's
``fonts-wqy-microhei``) from the pinned dependency ``mpl-font`` (pyproject.toml says why),
registered with matplotlib by every helper here, so that no system font is needed: a fresh
cloud runtime or a GPU machine without fonts draws Chinese, not boxes.
"""
import importlib.util
import os
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
        warnings.warn('d2lzh.plot: no Chinese font, so Chinese labels show as boxes; install '
                      "d2lzh's font with: pip install mpl-font==1.1.0", stacklevel=3)


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
        raise ValueError(f'bar_chart: {len(labels)} labels for {len(values)} values; '
                         'give one label per value (at least one)')
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


def _short(name, width=48):
    """A kernel's long C++ name cut to ``width`` characters, for a legend."""
    return name if len(name) <= width else name[:width - 1] + '…'


def timeline(trace, ax=None, title=None, rows=None, legend=6):
    """Draw a profiler's Chrome trace as a timeline and return the Axes (beyond the book).

    One row per process/thread of the trace (an MXNet device and engine thread, a PyTorch
    thread or CUDA stream), its operators as bars on a time axis in milliseconds from the
    first event, so that what runs at the same time is seen side by side. Reads complete
    events (``ph`` 'X', with ``dur``) and begin/end pairs ('B'/'E', async 'b'/'e'), what
    ``mx.profiler.dump()`` and ``torch.profiler``'s ``export_chrome_trace`` write; the
    same file opens in Perfetto (ui.perfetto.dev) or chrome://tracing.

    ``trace``: the parsed JSON (dict) or the file's path; ``ax``: draw there (None: a new
    figure); ``rows(label) -> bool`` keeps only the rows it accepts; the ``legend`` most
    frequent operator names get a colour and a legend entry (cut to 48 characters).
    ValueError: the trace holds no timed event.
    """
    import json
    from collections import Counter, defaultdict

    import matplotlib.pyplot as plt
    _use_chinese_font()
    if not isinstance(trace, dict):
        with open(trace, encoding='utf-8') as f:
            trace = json.load(f)
    events = trace['traceEvents'] if isinstance(trace, dict) else trace
    names, bars, open_ = {}, defaultdict(list), {}
    for e in events:
        key = (e.get('pid'), e.get('tid'))
        if e.get('ph') == 'M' and e.get('name') in ('process_name', 'thread_name'):
            names[(e['pid'], None if e['name'] == 'process_name' else e.get('tid'))] = \
                str(e.get('args', {}).get('name', ''))
        elif e.get('ph') == 'X' and 'dur' in e:
            bars[key].append((e['ts'], e['dur'], e.get('name', '')))
        elif e.get('ph') in ('B', 'b'):  # b/e: async events (MXNet's frontend API calls)
            open_[key + (e.get('name'), e.get('id'))] = e['ts']
        elif e.get('ph') in ('E', 'e') and key + (e.get('name'), e.get('id')) in open_:
            start = open_.pop(key + (e.get('name'), e.get('id')))
            bars[key].append((start, e['ts'] - start, e.get('name', '')))
    label = {k: ' '.join(filter(None, (names.get((k[0], None)), names.get(k)))) or f'{k[0]}/{k[1]}'
             for k in bars}
    for text in set(label.values()):  # several threads of one process: number them
        same = sorted(k for k in label if label[k] == text)
        for i, k in enumerate(same if len(same) > 1 else []):
            label[k] = f'{text} #{i + 1}'
    keys = sorted((k for k in bars if rows is None or rows(label[k])), key=lambda k: label[k])
    if not keys:
        raise ValueError('timeline: the trace holds no timed event (ph X, or B/E pairs)')
    t0 = min(ts for k in keys for ts, _, _ in bars[k])
    common = [n for n, _ in Counter(n for k in keys for _, _, n in bars[k]).most_common(legend)]
    colours = {n: f'C{i}' for i, n in enumerate(common)}
    if ax is None:
        _, ax = plt.subplots(figsize=(8, 0.5 + 0.45 * len(keys)))
    span = max(ts + dur for k in keys for ts, dur, _ in bars[k]) - t0  # a bar's least width
    for row, k in enumerate(keys):
        ax.broken_barh([((ts - t0) / 1e3, max(dur, span / 800) / 1e3) for ts, dur, _ in bars[k]],
                       (row - 0.4, 0.8), edgecolor='white', linewidth=0.3,
                       facecolors=[colours.get(n, 'lightgray') for _, _, n in bars[k]])
    ax.set_yticks(range(len(keys)))
    ax.set_yticklabels([label[k] for k in keys])
    ax.set_xlabel('ms')
    ax.legend(handles=[plt.Rectangle((0, 0), 1, 1, color=c) for c in colours.values()],
              labels=[_short(n.lstrip('_')) for n in colours], fontsize='small', loc='upper left',
              bbox_to_anchor=(1.01, 1))
    if title:
        ax.set_title(title)
    return ax
