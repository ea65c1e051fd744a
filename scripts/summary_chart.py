"""make run's chart of speed-ups (``build/run/summary.png``): each notebook's headline speed-up
or ratio (:func:`run_summary.speedups`) as a bar from 1x on a log axis, coloured by what its
range supports. Used by scripts/run_summary.py, which also takes :func:`ratio_text` from here.

Any item is drawn: a value that cannot sit on a log axis (0, negative, not finite) is left out
by :func:`chartable`, a lower bound of 0 or below is drawn to the axis's left edge, and values
beyond :data:`LIMITS` are drawn at the limit. :func:`draw_chart` writes the PNG to a temporary
file beside ``path`` and moves it into place, so an older chart stays until a new one is drawn.
"""
import math
import os
import textwrap
from pathlib import Path

from d2lzh.timing import NOISE, VERDICTS, format_ratio

COLOURS = {'faster': ('tab:green', f'更快（范围在 1 的右侧，快 {NOISE:.0%} 以上）'),
           'slower': ('tab:red', f'更慢（范围在 1 的左侧，慢 {NOISE:.0%} 以上）'),
           'same': ('tab:gray', VERDICTS[0]), None: ('tab:blue', '没有记录范围'),
           'plain': ('tab:purple', '只报比值（笔记本不判断快慢）')}
LIMITS = (2.0 ** -20, 2.0 ** 20)  # the axis never reaches beyond these ratios


def ratio_text(value):
    """A ratio as text: :func:`d2lzh.timing.format_ratio` (2 decimals, more near 1), but two
    significant digits below 0.1, so that a positive ratio never reads 0.00 (0.0031)."""
    if isinstance(value, (int, float)) and math.isfinite(value) and 0 < abs(value) < 0.1:
        return f'{value:.{1 - math.floor(math.log10(abs(value)))}f}'
    return format_ratio(value)


def chartable(value):
    """Whether ``value`` can be a bar on the log axis: a finite number above 0."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) \
        and math.isfinite(value) and value > 0


def _bounds(items):
    """Each item's value, low and high, within :data:`LIMITS`; a low that cannot sit on the
    axis (0 or below) is None; then the axis's (left, right) edges."""
    clip = lambda v: min(max(v, LIMITS[0]), LIMITS[1])  # noqa: E731
    values, lows, highs = [], [], []
    for it in items:
        v = clip(it['value'])
        low, high = it['spread'] or (v, v)
        values.append(v)
        lows.append(clip(min(v, low)) if chartable(low) else None)
        highs.append(clip(max(v, high)) if chartable(high) else v)
    left = min([lo for lo in lows if lo is not None] + values + [0.5]) / 1.15
    right = max(highs + [2.0]) * 1.6
    return values, [left if lo is None else lo for lo in lows], highs, (left, right)


def draw_chart(items, path):
    """Draw ``items`` (:func:`speedups`: those with a :func:`chartable` value) as bars from 1×
    on a log axis (0.5× and 2× equally far from 1×), coloured by what their range supports,
    with the range as error bars, into ``path`` (replaced only once the new chart is drawn)."""
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.patches
    import matplotlib.pyplot as plt
    from d2lzh import plot
    items = [it for it in items if chartable(it['value'])]
    labels = [textwrap.fill(it['label'], 34) for it in items]
    plot.set_figsize((12, 1.8 + 0.3 * sum(lb.count('\n') + 1.2 for lb in labels)))
    fig, ax = plt.subplots()
    try:
        _draw(ax, items, labels, matplotlib)
        fig.tight_layout()
        _save(fig, Path(path))
    finally:
        plt.close(fig)


def _draw(ax, items, labels, matplotlib):
    """The bars, error bars, axis, labels and legend of :func:`draw_chart` on ``ax``."""
    values, lows, highs, (lo, hi) = _bounds(items)
    ys = range(len(items))
    err = [[v - low for v, low in zip(values, lows)], [high - v for v, high in zip(values, highs)]]
    ax.barh(ys, [v - 1 for v in values], left=1, xerr=err, capsize=3,
            color=[COLOURS.get(it['verdict'], COLOURS[None])[0] for it in items])
    ax.axvline(1.0, color='black', linewidth=1.2)
    ax.set_xscale('log', base=2)
    ax.set_xlim(lo, hi)
    ticks = [2.0 ** e for e in range(math.floor(math.log2(lo)), math.ceil(math.log2(hi)) + 1)
             if lo <= 2.0 ** e <= hi]
    ax.set_xticks(ticks, [f'{t:g}×' for t in ticks])
    ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
    ax.set_yticks(list(ys), labels, fontsize='small')
    ax.invert_yaxis()
    for y, it, high in zip(ys, items, highs):
        ax.annotate(f"{ratio_text(it['value'])}×", (max(high, 1), y), xytext=(4, 0),
                    textcoords='offset points', va='center', fontsize='small')
    used = [k for k in COLOURS if any(it['verdict'] == k for it in items)]
    ax.legend(handles=[matplotlib.patches.Patch(color=COLOURS[k][0], label=COLOURS[k][1])
                       for k in used], loc='lower right', fontsize='small')
    ax.set_xlabel('加速比（对数坐标，1× = 没有差别）：各次重复的中位数；误差线：范围')
    ax.set_title('make run 测得的各节加速比：1× 右侧更快，左侧更慢')


def _save(fig, path):
    """Save ``fig`` as PNG to a temporary file in ``path``'s folder, then move it onto ``path``."""
    part = path.with_name(f'.{path.name}.{os.getpid()}.part')
    try:
        fig.savefig(part, format='png', dpi=100, metadata={'Software': None})
        os.replace(part, path)
    finally:
        part.unlink(missing_ok=True)
