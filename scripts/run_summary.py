"""The summary of ``make run``: what every notebook run into ``build/run/`` measured, in Chinese.

Used by ``scripts/run_notebooks.py``. A notebook's successful run leaves
``build/run/<edition>/results/NAME.json`` (wall time, the figures of ``d2l.record``: see
:func:`run_notebooks.read_figures`) and appends them to ``build/run/history.jsonl``. The
summary, on the console (:func:`summary_lines`) and in ``summary.md``, says per edition:

1. what this machine can and cannot show (no GPU, two devices on the same cores, subsets, and
   the reasons a notebook gives that it did not measure: :data:`REASONS`);
2. one takeaway per section from its headline figure and its spread: a speed-up whose range
   without a clear direction (d2lzh.timing.direction) is 测不出明显差别, never faster or slower;
   a ratio (kind ``'ratio'``: one the notebook itself reports without a verdict, e.g. where
   stored runs fell on both sides of the d2lzh.timing.NOISE line) is given as a ratio, with no
   verdict;
3. the table: every notebook's headline figure and earlier runs (summary.md: every figure).

One rule for numbers (:func:`format_value`). ``summary.png`` charts each notebook's headline
speed-up or headline ratio (the latter in its own colour, no verdict); ``summary.html`` shows both
on one page.
"""
import math
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from d2lzh.data import TEXT_LABELS, TRAIN_SIZE  # noqa: E402
from d2lzh.project import EDITIONS  # noqa: E402
from d2lzh.timing import NOISE, VERDICTS, direction  # noqa: E402
from summary_chart import chartable, draw_chart, ratio_text  # noqa: E402  (summary.png)
from summary_records import HISTORY, SummaryError, broken  # noqa: E402,F401
from summary_records import load_history, load_rows, number, spread_of  # noqa: E402,F401

HISTORY_RUNS = 3  # runs of a headline figure shown in its line
CHANCE, NEAR_CHANCE = 1 / len(TEXT_LABELS), 0.05  # a guess among the classes, and how near
#: Tags that give a reason the notebook did not measure: said among what the machine cannot
#: show, never beside a number (the notebooks should record them as words of their own).
REASONS = {
    'CPU 版 MXNet 没有内存池': 'CPU 版 MXNet 没有内存池：GPU 内存池的效果（4.6 节）在这台机器上'
        '看不到，4.6 的复制加速比不是内存池带来的。',
    'GPU 版 MXNet 的内存池': '4.6 节没有单独测量 GPU 内存池：第二次复制的加速比不能全部算在内存池头上。',
    'CPU 上没有缓存分配器': 'PyTorch 在 CPU 上没有缓存分配器：它的效果（4.6 节）在这台机器上看不到。',
    'PyTorch 的缓存分配器': '4.6 节没有单独测量缓存分配器：第二次复制的加速比不能全部算在它头上。',
    'CPU 版 MXNet：锁页内存就是普通内存': 'CPU 版 MXNet 的锁页内存就是普通内存：锁页内存的好处（8.3 节）在这台机器上看不到。'}
#: Labels recorded wrongly, corrected here until their notebook records them right.
LABEL_FIXES = ((re.compile(r'^CPU 与 cpu\((\d+)\)'), r'cpu(0) 与 cpu(\1)'),)
#: What each section's headline figure asks, so that its takeaway says why it was measured.
QUESTIONS = {
    '4.6': '第一次把数据复制到设备上，要不要多付一次性的开销？',
    '8.1': 'hybridize() 把逐个执行的运算变成一张计算图，能省下多少 Python 的开销？',
    '8.2': '前端不等每一步的结果、让后端在后面执行，能快多少？',
    '8.3': '两个设备上互不依赖的任务，引擎能不能同时执行？',
    '8.4': '把小批量分给 2 个设备，训练能不能更快？',
    '8.5': '用框架自带的数据并行在 2 个设备上训练，能不能更快？',
    '多机训练': '参数服务器的每一步，通信要花多少时间？'}
NOTHING = '还没有哪个笔记本成功运行过：运行 make run 之后，这里汇总它们测得的数字。'
READING = ('读法：加速比 = 之前的用时 / 之后的用时，取多次重复的中位数，括号里是各次重复的范围；'
           f'各次重复不全在 1 的同一侧、或中位数离 1 不到 {NOISE:.0%} 时写“{VERDICTS[0]}”，不说快慢。')


# ---------------------------------------------------------------- figures
def headline(figures):
    """The notebook's headline figure ``(key, figure)``: the one recorded with
    ``headline=True``, else its first speed-up, else its first figure; ``(None, None)``."""
    for test in (lambda k, f: f.get('headline'), lambda k, f: kind_of(k, f) == 'speedup',
                 lambda k, f: True):
        for key, fig in figures.items():
            if test(key, fig):
                return key, fig
    return None, None


def kind_of(key, fig):
    """``'speedup'``, ``'ratio'``, ``'accuracy'`` or None: the recorded ``kind``, else guessed
    (unit ``'x'``: a speed-up unless its key says ratio; a fraction whose key says acc)."""
    if fig.get('kind'):
        return fig['kind']
    if fig.get('unit') == 'x':
        return 'ratio' if 'ratio' in key else 'speedup'
    fraction = isinstance(fig.get('value'), float) and 0 <= fig['value'] <= 1
    return 'accuracy' if not fig.get('unit') and 'acc' in key.split('_') and fraction else None


#: units recorded in English words, as a reader of the summary reads them (ms, s, MB stay)
UNIT_WORDS = {'images/s': '张/秒', 'kernels': '个核函数'}


def format_value(value, unit='', kind=None):
    """The one rule: ratios ``0.99×`` (2 decimals; ``0.997×`` where 2 would read 1.00; 2
    significant digits below 0.1, ``0.0031×``: :func:`summary_chart.ratio_text`), accuracies
    ``0.70``, anything else 3 significant digits (no exponent) and its unit; ints, text and
    numbers that are not finite as they are; None is 没有数值."""
    if value is None:
        return '没有数值'
    if not number(value):
        text = str(value)
    elif unit == 'x' or kind in ('speedup', 'ratio'):
        return f'{ratio_text(value)}×'
    elif kind == 'accuracy':
        text = f'{value:.2f}'
    elif isinstance(value, int):
        text = str(value)
    else:
        digits = 0 if value == 0 else max(0, 2 - math.floor(math.log10(abs(value))))
        text = f'{value:.{digits}f}'
    return f'{text}×' if unit == 'x' else f'{text} {UNIT_WORDS.get(unit, unit)}'.strip()


def verdict(fig):
    """What a ratio's range supports, by the notebooks' rule (:func:`d2lzh.timing.direction`):
    ``'faster'``, ``'slower'``, ``'same'`` (no clear difference) or None (no whole range, or
    no number, recorded)."""
    if spread_of(fig) is None or not number(fig.get('value')):
        return None
    return {1: 'faster', -1: 'slower', 0: 'same'}[direction(fig['value'], *spread_of(fig))]


def _range(fig, kind):
    return '–'.join(format_value(x, fig.get('unit', ''), kind) for x in spread_of(fig))


def _no_range(fig):
    """Why a ratio gets no verdict: no number, no range recorded, or only part of one."""
    if not number(fig.get('value')):
        return '没有记录数值，不判断快慢'
    return f"没有记录{'完整的' if fig.get('spread') else ''}重复的范围，不判断快慢"


def _near_chance(key, fig):
    return number(fig.get('value')) and kind_of(key, fig) == 'accuracy' and \
        abs(fig['value'] - CHANCE) <= NEAR_CHANCE


def value_text(key, fig):
    """``1.17×（1.16×–1.18×）``; a speed-up without a clear direction adds 测不出明显差别; an accuracy
    near chance and one trained on a subset say so."""
    kind = kind_of(key, fig)
    text = format_value(fig.get('value'), fig.get('unit', ''), kind)
    if spread_of(fig):
        same = f'，{VERDICTS[0]}' if kind == 'speedup' and verdict(fig) == 'same' else ''
        text += f'（{_range(fig, kind)}{same}）'
    elif fig.get('spread'):
        text += f'（{_no_range(fig)}）'
    if kind == 'accuracy':
        if _near_chance(key, fig):
            text += f'（接近随机猜测的 {CHANCE:.2f}）'
        if fig.get('subset') is not None:
            text += f"（只用了前 {fig['subset']} 张训练图像）"
    return text


def label(key, fig):
    """The figure in words, corrected by :data:`LABEL_FIXES`; the key where none was recorded."""
    text = fig.get('what') or key
    for pattern, repl in LABEL_FIXES:
        text = pattern.sub(repl, text)
    return text


def measured_on(fig, key=''):
    """What a figure was measured on: its tags but :data:`REASONS`, the training subset
    (an accuracy says it in its value), its note."""
    tags = [t for t in fig.get('tags') or [] if t not in REASONS]
    subset = fig.get('subset')
    if subset is not None and kind_of(key, fig) != 'accuracy' and \
            not any(f'前 {subset} 张' in t for t in tags):
        tags.append(f'只用了前 {subset} 张训练图像（共 {TRAIN_SIZE} 张）')
    if fig.get('note'):
        tags.append(fig['note'])
    return tags


# ---------------------------------------------------------------- rows and history
def history_entry(row):
    """One line of ``history.jsonl`` for a successful run: when, how long, its headline
    key and the value of every figure."""
    return {'edition': row['edition'], 'name': row['name'], 'finished': row['finished'],
            'seconds': row['seconds'], 'headline': headline(row['figures'])[0],
            'figures': {k: f['value'] for k, f in row['figures'].items()}}


def _earlier(row, key, history):
    """``最近 3 次运行：1.20×、1.75×、1.80×`` for a figure seen in two or more runs."""
    values = [e['figures'][key] for e in history.get((row['edition'], row['name']), [])
              if number(e['figures'].get(key))][-HISTORY_RUNS:]
    if len(values) < 2:
        return ''
    fig = row['figures'][key]
    return f"最近 {len(values)} 次运行：" + '、'.join(
        format_value(v, fig.get('unit', ''), kind_of(key, fig)) for v in values)


# ---------------------------------------------------------------- text
def _title(row):
    return (row.get('title') or row['name']).split('（')[0].strip()


def edition_header(edition, rows):
    """``MXNet 版（notebooks/）：2 个 CPU 核心，没有 MXNet 能用的 GPU``."""
    framework, folder = EDITIONS.get(edition, (edition, ''))
    gpus = [f['gpus'] for r in rows for f in r['figures'].values() if f.get('gpus') is not None]
    cores = max((r.get('cpu_cores') or 0 for r in rows), default=0)
    where = (f'{cores} 个 CPU 核心，' if cores else '') + (
        '没有数字说明用了几块 GPU' if not gpus else
        f'没有 {framework} 能用的 GPU' if max(gpus) == 0 else
        f'{max(gpus)} 块 {framework} 能用的 GPU')
    return f'{framework} 版（{folder}）：{where}'


def machine_notes(edition, rows):
    """What this machine can and cannot show for one edition, in Chinese sentences."""
    figures = [(k, f) for r in rows for k, f in r['figures'].items()]
    gpus = [f['gpus'] for _, f in figures if f.get('gpus') is not None]
    subsets = sorted({f['subset'] for _, f in figures if f.get('subset') is not None})
    framework = EDITIONS.get(edition, (edition,))[0]
    notes = []
    if gpus and max(gpus) == 0:
        notes += [f'能展示：每段代码在没有 GPU 时也能运行，以及各种做法在这台 CPU 上的快慢'
                  '（例如 hybridize() 前后、每次都同步与只在最后同步）。',
                  f'不能展示：GPU 带来的加速。没有 {framework} 能用的 GPU，笔记本比较“2 个设备”时，'
                  '两个设备（cpu(0) 和 cpu(1)）共用同一组 CPU 核心，测得的加速比不能说明两块 GPU '
                  '的情形。']
    elif gpus and max(gpus) == 1:
        notes.append(f'只有 1 块 {framework} 能用的 GPU：比较 2 个设备时比较的不是两块 GPU'
                     '（每个笔记本都写明了在什么上运行）。')
    tags = {t for _, f in figures for t in f.get('tags') or []}
    notes += [REASONS[t] for t in REASONS if t in tags]
    if subsets:
        notes.append(f"只用了前 {' 或 '.join(map(str, subsets))} 张训练图像（共 {TRAIN_SIZE} 张）"
                     '的数字来自训练数据的子集（没有 GPU 时的默认设置，让一次运行几分钟内结束；'
                     '或由 D2LZH_MAX_EXAMPLES 指定）：迭代周期的用时只对应这个子集，测试准确率也会偏低。'
                     '书中的设置需要 GPU，或设 D2LZH_MAX_EXAMPLES=all。')
    if any(_near_chance(k, f) for k, f in figures):
        notes.append(f'测试准确率接近 {CHANCE:.2f} 的模型什么也没学会'
                     f'（{len(TEXT_LABELS)} 个类别里随机猜测）：'
                     '只说明这样的设置在这里训练不起来。')
    return notes + [READING]


def _subject(text):
    """A label as the subject of a takeaway: without 的加速比 / 快的倍数 / a final 快, and
    with its colons as commas (the takeaway has its own)."""
    text = re.sub(r'(快了|快)$', '', text.replace('的加速比', '').replace('快的倍数', '')).strip()
    return text.replace('：', '，')


def takeaway(row):
    """One sentence for the row's section from its headline figure and its spread."""
    head = f'{_title(row)}：'
    if row.get('status', 'ok') != 'ok':
        return f"{head}运行失败，没有结论（{row.get('error', '')}）。"
    key, fig = headline(row['figures'])
    if key is None:
        return f'{head}没有记录任何数字。'
    kind, subject = kind_of(key, fig), _subject(label(key, fig))
    value = format_value(fig.get('value'), fig.get('unit', ''), kind)
    if kind == 'ratio' and verdict(fig):
        text = f'比值 {value}（范围 {_range(fig, kind)}；本节只报比值，不判断快慢）'
    elif kind == 'speedup' and verdict(fig):
        text = {'faster': f'{VERDICTS[1]} {value}（范围 {_range(fig, kind)}）',
                'slower': f'{VERDICTS[-1]}，只有原来速度的 {value}（范围 {_range(fig, kind)}）',
                'same': f'{VERDICTS[0]}（{value}，范围 {_range(fig, kind)}）'}[verdict(fig)]
    elif kind in ('speedup', 'ratio'):
        text = f'{value}（{_no_range(fig)}）'
    else:
        text = value_text(key, fig)
    tags = measured_on(fig, key)
    subject = f'{subject}：' if subject else ''
    question = QUESTIONS.get(_title(row).split()[0], '')
    return f"{head}{question}{subject}{text}" + (f"；条件：{'；'.join(tags)}" if tags else '') + '。'


def notebook_line(row, history):
    """The table's line for a notebook: title, wall time, headline figure, earlier runs."""
    seconds = row.get('seconds')
    head = f"{_title(row)}（{f'{seconds:.0f} 秒' if number(seconds) else '用时不详'}）"
    if row.get('status', 'ok') != 'ok':
        return f"{head}：失败：{row.get('error', '')}"
    key, fig = headline(row['figures'])
    if key is None:
        return f'{head}：没有记录任何数字'
    earlier = _earlier(row, key, history)
    return f'{head}：{value_text(key, fig)}' + (f'；{earlier}' if earlier else '')


def summary_lines(rows_by_edition, history):
    """The summary as printed at the end of ``make run``: per edition what the machine can
    and cannot show, one takeaway per section, then one line per notebook."""
    lines = []
    for edition, rows in rows_by_edition.items():
        lines += [edition_header(edition, rows), '这台机器能展示什么、不能展示什么：']
        lines += [f'  - {n}' for n in machine_notes(edition, rows)]
        lines += ['每节的结论：'] + [f'  {takeaway(r)}' for r in rows]
        lines += ['每个笔记本的用时和主要结果：'] + [f'  {notebook_line(r, history)}' for r in rows]
    return lines or [NOTHING]


def summary_markdown(rows_by_edition, history, build=None, chart=True):
    """``summary.md``: per edition what the machine can and cannot show and the takeaways,
    then the chart, then per edition its notebooks' lines (linked to their pages where
    ``build/run/<edition>/NAME.html`` exists) and every figure."""
    def cell(text):
        return str(text).replace('|', '\\|').replace('\n', ' ')

    lines = ['# make run 的结果汇总', '',
             '下面的数字都是这台机器上测得的（笔记本的正文可能引用保存的参考运行）。'] + \
        ([] if rows_by_edition else ['', NOTHING])
    for edition, rows in rows_by_edition.items():
        lines += ['', f'## {edition_header(edition, rows)}', '',
                  '### 这台机器能展示什么、不能展示什么', '']
        lines += [f'- {n}' for n in machine_notes(edition, rows)]
        lines += ['', '### 每节的结论', ''] + [f'- {takeaway(r)}' for r in rows]
    if chart:
        lines += ['', '## 各节的加速比', '', '![make run 测得的各节加速比：中位数，误差线是各次重复的'
                  '范围](summary.png)']
    for edition, rows in rows_by_edition.items():
        lines += ['', f'## {EDITIONS.get(edition, (edition,))[0]} 版：每个笔记本', '']
        for r in rows:
            text, page = notebook_line(r, history), f"{edition}/{r['name']}.html"
            if build is not None and (Path(build) / 'run' / page).exists():
                text = f'[{_title(r)}]({page})' + text[len(_title(r)):]
            lines.append(f'- {text}')
        lines += ['', '| 笔记本 | 数字 | 数值 | 测量条件 |', '|---|---|---|---|']
        for r in rows:
            for key, fig in r['figures'].items():
                name = f'{label(key, fig)}（`{key}`）' if fig.get('what') else f'`{key}`'
                lines.append(f"| {r['name']} | {cell(name)} | {cell(value_text(key, fig))} | "
                             f"{cell('；'.join(measured_on(fig, key)))} |")
    return '\n'.join(lines) + '\n'


# ---------------------------------------------------------------- chart
def speedups(rows_by_edition):
    """The headline speed-up or ratio of each notebook (a figure that is not its headline is
    never charted), in the summary's order: dicts with edition, label (Chinese, with the
    conditions that change its reading, e.g. 2 个设备 = 同一组 CPU 核心), key, value, spread,
    verdict (:func:`verdict`; ``'plain'`` for a ratio, which has none), record (its file). A
    value the log axis cannot show (0, negative) is left out: the summary's text gives it."""
    out = []
    for edition, rows in rows_by_edition.items():
        short = EDITIONS.get(edition, (edition,))[0]
        for r in rows:
            for key, fig in r['figures'].items():
                kind = kind_of(key, fig)
                if kind in ('speedup', 'ratio') and chartable(fig.get('value')) \
                        and fig.get('headline'):
                    tags = '；'.join(t for t in measured_on(fig, key) if '=' in t or '代替' in t)
                    out.append({'edition': edition, 'key': f"{short} {r['name']}: {key}",
                                'label': f"{short} {_title(r).split()[0]} "
                                         f"{_subject(label(key, fig))}" + (f'（{tags}）' if tags else ''),
                                'value': float(fig['value']), 'spread': spread_of(fig),
                                'verdict': verdict(fig) if kind == 'speedup' else 'plain',
                                'record': r.get('record')})
    return out


# ---------------------------------------------------------------- files
def check_rows(rows_by_edition, history, build):
    """Each row's summary text and chart item, made alone: SummaryError (:func:`broken`) names
    the record of the first one that fails, before any summary file is replaced."""
    for edition, rows in rows_by_edition.items():
        for r in rows:
            try:
                summary_markdown({edition: [r]}, history)
                summary_lines({edition: [r]}, history)
                speedups({edition: [r]})
            except Exception as err:  # whatever a record holds, the message names it
                raise SummaryError(broken(build, err, r['record'])) from err


def write_summary(build, render_page):
    """Write ``summary.md``, ``summary.png`` (when a speed-up was measured; else an older
    chart is removed) and ``summary.html`` (``render_page(markdown, dest)``) into
    ``build/run/``. Without matplotlib or nbconvert (a bare GPU machine) the chart or the
    page is left out with a warning. Returns (rows by edition, history).

    A record that breaks the summary or its chart raises :class:`SummaryError`, its message
    naming the record and the fix, with the earlier summary files as they were: the chart is
    drawn to a temporary file and replaces the older one only once drawn."""
    run = Path(build) / 'run'
    rows, history = load_rows(build), load_history(build)
    check_rows(rows, history, build)
    items, chart, drawn = speedups(rows), run / 'summary.png', False
    if not items:
        chart.unlink(missing_ok=True)
    else:
        try:
            draw_chart(items, chart)
            drawn = True
        except ImportError as err:
            print(f'  警告：没有画出加速比的图：{err}', flush=True)
        except Exception as err:  # noqa: BLE001 (the runner says what to do)
            raise SummaryError(broken(build, err, *sorted({str(it['record']) for it in items}))) \
                from err
    text = summary_markdown(rows, history, build, chart=drawn)
    (run / 'summary.md').write_text(text, encoding='utf-8')
    try:
        render_page(text, run / 'summary.html')
    except (ImportError, RuntimeError) as err:
        print(f'  警告：没有生成汇总网页：{err}', flush=True)
    return rows, history
