"""make run's chart of speed-ups (``build/run/summary.png``): each notebook's headline speed-up
or ratio (:func:`run_summary.speedups`) as a bar from 1x on a log axis, coloured by what its
range supports. Used by scripts/run_summary.py."""
import math
import textwrap

from d2lzh.timing import format_ratio

COLOURS = {'faster': ('tab:green', '更快（范围在 1 的右侧，快 10% 以上）'),
           'slower': ('tab:red', '更慢（范围在 1 的左侧，慢 10% 以上）'),
           'same': ('tab:gray', '测不出明显差别'), None: ('tab:blue', '没有记录范围'),
           'plain': ('tab:purple', '只报比值（笔记本不判断快慢）')}


def draw_chart(items, path):
    """Draw ``items`` (:func:`speedups`) as bars from 1× on a log axis (0.5× and 2× equally
    far from 1×), coloured by what their range supports, with the range as error bars."""
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.patches
    import matplotlib.pyplot as plt
    from d2lzh import plot
    labels = [textwrap.fill(it['label'], 34) for it in items]
    plot.set_figsize((12, 1.8 + 0.3 * sum(lb.count('\n') + 1.2 for lb in labels)))
    fig, ax = plt.subplots()
    values = [it['value'] for it in items]
    lows = [min(v, (it['spread'] or (v, v))[0]) for v, it in zip(values, items)]
    highs = [max(v, (it['spread'] or (v, v))[1]) for v, it in zip(values, items)]
    ys = range(len(items))
    err = [[v - lo for v, lo in zip(values, lows)], [hi - v for v, hi in zip(values, highs)]]
    ax.barh(ys, [v - 1 for v in values], left=1, xerr=err, capsize=3,
            color=[COLOURS[it['verdict']][0] for it in items])
    ax.axvline(1.0, color='black', linewidth=1.2)
    ax.set_xscale('log', base=2)
    lo, hi = min(lows + [0.5]) / 1.15, max(highs + [2.0]) * 1.6
    ax.set_xlim(lo, hi)
    ticks = [2.0 ** e for e in range(math.floor(math.log2(lo)), math.ceil(math.log2(hi)) + 1)
             if lo <= 2.0 ** e <= hi]
    ax.set_xticks(ticks, [f'{t:g}×' for t in ticks])
    ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
    ax.set_yticks(list(ys), labels, fontsize='small')
    ax.invert_yaxis()
    for y, v, high in zip(ys, values, highs):
        ax.annotate(f'{format_ratio(v)}×', (max(high, 1), y), xytext=(4, 0),
                    textcoords='offset points', va='center', fontsize='small')
    used = [k for k in COLOURS if any(it['verdict'] == k for it in items)]
    ax.legend(handles=[matplotlib.patches.Patch(color=COLOURS[k][0], label=COLOURS[k][1])
                       for k in used], loc='lower right', fontsize='small')
    ax.set_xlabel('加速比（对数坐标，1× = 没有差别）：各次重复的中位数；误差线：范围')
    ax.set_title('make run 测得的各节加速比：1× 右侧更快，左侧更慢')
    fig.tight_layout()
    fig.savefig(path, format='png', dpi=100, metadata={'Software': None})
    plt.close(fig)
