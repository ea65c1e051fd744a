"""The summary of ``make run``: what every notebook run into ``build/run/`` measured.

Used by ``scripts/run_notebooks.py``. Each successful run of a notebook leaves
``build/run/<edition>/results/NAME.json`` (wall time and the figures it recorded with
``d2l.record``, see :func:`d2lzh.results.read_figures`) and appends its figures to
``build/run/history.jsonl``. From them this module writes

* ``build/run/summary.md``: per notebook one line with its headline figure in words and
  numbers, what it was measured on (the tags the notebook recorded with the figure, and the
  data subset) and the same figure in earlier runs; then every figure, and what this
  machine can and cannot show;
* ``build/run/summary.png``: one chart of every speed-up (unit ``'x'``) with its spread;
* ``build/run/summary.html``: both on one page that links each notebook's page.
"""
import json
import os
from pathlib import Path

TRAIN_SIZE = 60000  # Fashion-MNIST's training set (d2lzh.data.TRAIN_SIZE)
EDITIONS = {'mxnet': ('MXNet', 'notebooks/'), 'pytorch': ('PyTorch', 'notebooks/pytorch/')}
HISTORY = 'history.jsonl'
HISTORY_RUNS = 3  # runs of a headline figure shown in its line
# Fonts with Chinese glyphs that matplotlib may find; without one the chart uses the keys.
CJK_FONTS = ['Noto Sans CJK SC', 'Noto Sans SC', 'Source Han Sans SC', 'WenQuanYi Zen Hei',
             'WenQuanYi Micro Hei', 'SimHei', 'Microsoft YaHei', 'PingFang SC',
             'AR PL UMing CN', 'Droid Sans Fallback']


# ---------------------------------------------------------------- figures
def headline(figures):
    """The notebook's headline figure ``(key, figure)``: the one recorded with
    ``headline=True``, else its first speed-up (unit ``'x'``), else its first figure;
    ``(None, None)`` without figures."""
    for test in (lambda f: f.get('headline'), lambda f: f.get('unit') == 'x', lambda f: True):
        for key, fig in figures.items():
            if test(fig):
                return key, fig
    return None, None


def format_value(value, unit=''):
    """``3.07x``, ``41.2 ms``, ``0.812``: three significant digits and the unit."""
    text = f'{value:.3g}' if isinstance(value, float) else str(value)
    return f'{text}x' if unit == 'x' else f'{text} {unit}'.strip()


def figure_text(key, fig):
    """The figure in words and numbers: ``混合式编程后 MLP 快了 3.07x (2.95–3.12)``; the key
    stands in for the words where the notebook recorded none."""
    return f"{fig.get('what') or key} {value_text(fig)}"


def value_text(fig):
    """``3.07x (2.95–3.12)``: the value, and its range over repeats where recorded; a
    speed-up whose range covers 1x says that no difference was measurable."""
    text = format_value(fig['value'], fig.get('unit', ''))
    spread = fig.get('spread')
    if spread:
        low, high = spread
        covers = fig.get('unit') == 'x' and low <= 1 <= high
        text += f" ({format_value(low)}–{format_value(high)}" \
                f"{': no measurable difference' if covers else ''})"
    return text


def measured_on(fig):
    """What a figure was measured on, from the figure itself: the tags the notebook
    recorded with it, the training subset, its note."""
    tags = list(fig.get('tags') or [])
    if fig.get('subset') is not None:
        tags.append(f"first {fig['subset']} of {TRAIN_SIZE} training images")
    if fig.get('note'):
        tags.append(fig['note'])
    return tags


# ---------------------------------------------------------------- rows and history
def load_rows(build):
    """Every notebook whose results are in ``build/run/``: {edition: [row, ...]}."""
    rows = {}
    for path in sorted((Path(build) / 'run').glob('*/results/*.json')):
        row = json.loads(path.read_text(encoding='utf-8'))
        rows.setdefault(row['edition'], []).append(row)
    return dict(sorted(rows.items(), key=lambda kv: list(EDITIONS).index(kv[0])
                       if kv[0] in EDITIONS else len(EDITIONS)))


def history_entry(row):
    """One line of ``history.jsonl`` for a successful run: when, how long, its headline
    key and the value of every figure."""
    return {'edition': row['edition'], 'name': row['name'], 'finished': row['finished'],
            'seconds': row['seconds'], 'headline': headline(row['figures'])[0],
            'figures': {k: f['value'] for k, f in row['figures'].items()}}


def load_history(build):
    """{(edition, name): [entry, ...]} from ``build/run/history.jsonl``, oldest first;
    a line that is not JSON (a run cut off while writing it) is skipped."""
    out = {}
    path = Path(build) / 'run' / HISTORY
    if path.exists():
        for line in path.read_text(encoding='utf-8').splitlines():
            try:
                entry = json.loads(line)
            except json.JSONDecodeError:
                continue
            out.setdefault((entry['edition'], entry['name']), []).append(entry)
    return out


def _earlier(row, key, history):
    """``3.07x, 4.21x, 4.26x in the last 3 runs`` for a figure seen in two or more runs."""
    values = [e['figures'][key] for e in history.get((row['edition'], row['name']), [])
              if key in e.get('figures', {})][-HISTORY_RUNS:]
    if len(values) < 2:
        return ''
    unit = row['figures'][key].get('unit', '')
    return f"{', '.join(format_value(v, unit) for v in values)} in the last {len(values)} runs"


# ---------------------------------------------------------------- text
def _title(row):
    return (row.get('title') or row['name']).split('（')[0].strip()


def edition_header(edition, rows):
    """``MXNet edition (notebooks/): 2 CPU cores, no GPU that MXNet could use``."""
    framework, folder = EDITIONS.get(edition, (edition, ''))
    gpus = [f['gpus'] for r in rows for f in r['figures'].values() if f.get('gpus') is not None]
    cores = max((r.get('cpu_cores') or 0 for r in rows), default=0)
    where = (f'{cores} CPU cores, ' if cores else '') + (
        'no figure said how many GPUs were used' if not gpus else
        f'no GPU that {framework} could use' if max(gpus) == 0 else
        f'{max(gpus)} GPU{"s" if max(gpus) > 1 else ""} that {framework} could use')
    return f'{framework} edition ({folder}): {where}'


def notebook_line(row, history):
    """One line per notebook: title, wall time, headline figure, what it was measured on
    and the same figure in earlier runs."""
    head = f"{_title(row)} ({row['seconds']:.0f} s)"
    if row.get('status', 'ok') != 'ok':
        return f"{head}: FAILED: {row.get('error', '')}"
    key, fig = headline(row['figures'])
    if key is None:
        return f'{head}: recorded no figure'
    text, tags, earlier = figure_text(key, fig), measured_on(fig), _earlier(row, key, history)
    if tags:
        text += f" [{'; '.join(tags)}]"
    return f'{head}: {text}' + (f'; {earlier}' if earlier else '')


def summary_lines(rows_by_edition, history):
    """The summary as printed at the end of ``make run``: per edition its header, then one
    line per notebook."""
    lines = []
    for edition, rows in rows_by_edition.items():
        lines.append(edition_header(edition, rows))
        lines += [f'  {notebook_line(r, history)}' for r in rows]
    return lines


def _machine_notes(edition, rows):
    """Lines saying what this machine can and cannot show for one edition."""
    figures = [f for r in rows for f in r['figures'].values()]
    gpus = [f['gpus'] for f in figures if f.get('gpus') is not None]
    subsets = sorted({f['subset'] for f in figures if f.get('subset') is not None})
    framework = EDITIONS.get(edition, (edition,))[0]
    notes = []
    if gpus and max(gpus) == 0:
        notes.append(
            f'No GPU that {framework} could use: this machine shows that every code path runs '
            'and how the techniques compare *on this CPU* (e.g. hybridized vs imperative, '
            'synchronous vs asynchronous loops). It cannot show what a GPU gains: where a '
            'notebook compares two devices, both are the same CPU cores (the notebook says so '
            'beside its figures), so that speed-up says nothing about two GPUs.')
    elif gpus and max(gpus) == 1:
        notes.append(f'One GPU that {framework} could use: a comparison of two devices did '
                     'not compare two GPUs (each notebook says what it ran on).')
    if subsets:
        notes.append(
            f"Figures marked \"first N of {TRAIN_SIZE} training images\" come from training "
            f"on a subset ({' or '.join(map(str, subsets))} images; the CPU default, so that a "
            'run ends in minutes, or `D2LZH_MAX_EXAMPLES`); their epoch times are for the '
            "subset. The book's settings need a GPU or `D2LZH_MAX_EXAMPLES=all`.")
    return notes


def _cell(text):
    return str(text).replace('|', '\\|').replace('\n', ' ')


def summary_markdown(rows_by_edition, history, build=None, chart=True):
    """``summary.md``: the chart, then per edition its notebooks' lines (linked to their
    pages where ``build/run/<edition>/NAME.html`` exists), every figure, and what this
    machine can and cannot show."""
    lines = ['# make run: summary', '',
             'Every notebook run into this folder with its headline figure, what it was '
             'measured on and the same figure in earlier runs; the numbers of this machine, '
             'where an executed notebook\'s prose may quote a stored reference run.']
    if chart:
        lines += ['', '![Every speed-up measured by make run: the median of repeats, '
                  'the line across each bar their range](summary.png)']
    for edition, rows in rows_by_edition.items():
        lines += ['', f'## {edition_header(edition, rows)}', '']
        for r in rows:
            text = notebook_line(r, history)
            page = f"{edition}/{r['name']}.html"
            if build is not None and (Path(build) / 'run' / page).exists():
                title = _title(r)
                text = f'[{title}]({page})' + text[len(title):]
            lines.append(f'- {text}')
        lines += ['', '| notebook | figure | value | measured on |', '|---|---|---|---|']
        for r in rows:
            for key, fig in r['figures'].items():
                name = f"{fig['what']} (`{key}`)" if fig.get('what') else f'`{key}`'
                lines.append(f"| {r['name']} | {_cell(name)} | "
                             f"{_cell(value_text(fig))} | "
                             f"{_cell('; '.join(measured_on(fig)))} |")
        notes = _machine_notes(edition, rows)
        if notes:
            lines += ['', '**What this machine can and cannot show**', '']
            lines += [f'- {n}' for n in notes]
    return '\n'.join(lines) + '\n'


# ---------------------------------------------------------------- chart
def speedups(rows_by_edition):
    """Every speed-up of the summary: (edition, label in words, label from the key,
    value, spread or None), in the summary's order."""
    out = []
    for edition, rows in rows_by_edition.items():
        short = EDITIONS.get(edition, (edition,))[0]
        for r in rows:
            for key, fig in r['figures'].items():
                if fig.get('unit') == 'x' and isinstance(fig['value'], (int, float)):
                    words = f"{short} {_title(r).split()[0]} {fig.get('what') or key}"
                    out.append((edition, words, f"{short} {r['name']}: {key}",
                                float(fig['value']), fig.get('spread')))
    return out


def _cjk_font():
    """The name of a font with Chinese glyphs that matplotlib finds, or None."""
    from matplotlib import font_manager
    names = {f.name for f in font_manager.fontManager.ttflist}
    return next((n for n in CJK_FONTS if n in names), None)


def draw_chart(items, path):
    """Draw ``items`` (see :func:`speedups`) as horizontal bars with their spread as error
    bars and a line at 1x into the PNG ``path``. The labels are the figures in words where
    matplotlib has a font with Chinese glyphs, else their keys."""
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.patches
    import matplotlib.pyplot as plt
    font = _cjk_font()
    colours = {'mxnet': 'tab:blue', 'pytorch': 'tab:orange'}
    with plt.rc_context({'font.family': [font, 'DejaVu Sans'] if font else ['DejaVu Sans']}):
        fig, ax = plt.subplots(figsize=(12, 1.6 + 0.38 * len(items)))
        ys = range(len(items))
        values = [it[3] for it in items]
        err = [[max(0.0, v - (it[4] or (v, v))[0]) for v, it in zip(values, items)],
               [max(0.0, (it[4] or (v, v))[1] - v) for v, it in zip(values, items)]]
        # bars start at 1x (no gain): to the right faster, to the left slower
        ax.barh(ys, [v - 1 for v in values], left=1, xerr=err, capsize=3,
                color=[colours.get(it[0], 'tab:gray') for it in items])
        ax.axvline(1.0, color='black', linewidth=1)
        ends = [v - lo for v, lo in zip(values, err[0])] + [v + hi for v, hi in zip(values, err[1])]
        if max(ends) / max(min(ends), 1e-9) > 20:  # 0.8x beside 30x: a log axis shows both
            ax.set_xscale('log')
        ax.legend(handles=[matplotlib.patches.Patch(color=colours[e], label=EDITIONS[e][0])
                           for e in colours if any(it[0] == e for it in items)],
                  loc='lower right', fontsize='small')
        ax.set_yticks(list(ys), [it[1] if font else it[2] for it in items])
        ax.invert_yaxis()
        for y, v, high in zip(ys, values, err[1]):
            ax.annotate(format_value(v, 'x'), (v + high, y), xytext=(4, 0),
                        textcoords='offset points', va='center', fontsize='small')
        ax.set_xlabel('speed-up (x), from 1x (no gain):\nmedian of repeats; error bar: their range')
        fig.suptitle('Every speed-up measured by make run')  # the labels leave the axes narrow
        ax.margins(x=0.15)
        fig.tight_layout()
        fig.savefig(path, format='png', dpi=100, metadata={'Software': None})
        plt.close(fig)


# ---------------------------------------------------------------- files
def write_summary(build, render_page):
    """Write ``summary.md``, ``summary.png`` (when a speed-up was measured; else an older
    chart is removed) and ``summary.html`` (``render_page(markdown, dest)``) into
    ``build/run/``. Without matplotlib or nbconvert (a bare GPU machine) the chart or the
    page is left out with a warning. Returns (rows by edition, history)."""
    run = Path(build) / 'run'
    rows, history = load_rows(build), load_history(build)
    items = speedups(rows)
    chart = run / 'summary.png'
    chart.unlink(missing_ok=True)
    if items:
        try:
            draw_chart(items, chart.with_suffix('.png.part'))
            os.replace(chart.with_suffix('.png.part'), chart)
        except ImportError as err:
            print(f'  warning: no chart of the speed-ups: {err}', flush=True)
    text = summary_markdown(rows, history, build, chart=chart.exists())
    (run / 'summary.md').write_text(text, encoding='utf-8')
    try:
        render_page(text, run / 'summary.html')
    except (ImportError, RuntimeError) as err:
        print(f'  warning: no summary page: {err}', flush=True)
    return rows, history
