"""Where nbval compares each stored output: a table per notebook, a total per edition, and the
coverage goals checked.

    python scripts/nbval_coverage.py [--check]

For every notebook of d2lzh/project.py, the code cells that have an output, split into:

* compared on CI's CPU (``make test``);
* compared only in ``make test-gpu`` (scripts/gpu_check.py): cells tagged ``stored-machine``
  of a notebook stored on GPUs, and cells tagged ``stored-data``, whose words depend on the data
  the stored run trained on (make test-gpu runs the MXNet notebooks named to it on the CPU with
  that data);
* figures: every text nbval compares in the cell is a matplotlib repr such as
  ``<Figure size 650x350 with 1 Axes>`` (nbval never compares the image itself), so the cell
  checks only that it ran, wherever it runs;
* compared nowhere: tagged ``nbval-ignore-output`` (or ``nbval-skip``), each with the reason in
  its metadata ``d2lzh.ignore``;

plus how many cells have their numbers masked (tag ``measured``, tests/nbval_measured.cfg).
``--check`` exits 1 when a goal below is missed; tests/test_nbval_coverage.py asserts each goal.
"""
import argparse
import json
import math
import re
import sys
import unicodedata
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / 'tests'))
from d2lzh import project  # noqa: E402  (no framework import: project.py is plain Python)
from nbval_tags import stored_gpus  # noqa: E402

# The goals (issue 47, item 3). Shares are of an edition's code cells with an output.
NOWHERE_LIMIT = 0.05     # at most 5 % of an edition's output cells compared nowhere
MXNET_CI_SHARE = 1.0     # every MXNet output cell but the figures compared as text on CI's CPU
PYTORCH_CI_SHARE = 0.5   # at least half of the PyTorch output cells (figures included in the
                         # count, never as compared) compared as text on CI's CPU
MEASURED_NEVER_IGNORED = 'MEASURED_NEVER_IGNORED'  # a cell printing a measurement: not ignored
GOALS = ('NOWHERE_LIMIT', MEASURED_NEVER_IGNORED, 'MXNET_CI_SHARE', 'PYTORCH_CI_SHARE')

MEASUREMENT = re.compile(r'\d(?:\.\d+)?\s*(?:ms|us|sec|s\b|秒|毫秒|微秒|MB|GB|MiB|GiB|images/s|'
                         r'张/秒|倍|×|%)')
FIGURE = re.compile(r'<Figure size \d+(?:\.\d+)?x\d+(?:\.\d+)? with \d+ Axes>')
NOT_COMPARED = ('image/png', 'image/jpeg')  # nbval's skip_compare without --nbdime


def compared_texts(cell):
    """The texts nbval compares in ``cell``'s outputs: streams, every data key but images,
    errors' name and value."""
    texts = []
    for out in cell.get('outputs', []):
        if 'text' in out:
            texts.append(''.join(out['text']))
        texts += [''.join(v) if isinstance(v, list) else str(v)
                  for k, v in out.get('data', {}).items() if k not in NOT_COMPARED]
        if out.get('output_type') == 'error':
            texts.append(f"{out.get('ename', '')}: {out.get('evalue', '')}")
    return texts


def is_figure(cell):
    """Whether every text nbval compares in ``cell`` is a matplotlib figure's repr."""
    return all(FIGURE.fullmatch(text.strip()) for text in compared_texts(cell))


def label(cell, number):
    """How a message names a cell: Jupyter's ``[4]``, else its place among the code cells."""
    count = cell.get('execution_count')
    return f'[{count}]' if count is not None else f'(第 {number} 个代码单元格)'


def classify(path):
    """The output cells of the notebook at ``path`` (relative to the repository root) by where
    nbval compares them: {'cpu', 'gpu', 'figure': [label], 'nowhere': [(label, reason,
    measures)], 'measured': n, 'cells': n}."""
    nb = json.loads((ROOT / path).read_text(encoding='utf-8'))
    on_gpus = stored_gpus(nb['metadata']) > 0
    row = {'cells': 0, 'cpu': [], 'gpu': [], 'figure': [], 'nowhere': [], 'measured': 0}
    code = [c for c in nb['cells'] if c['cell_type'] == 'code']
    for number, cell in enumerate(code, 1):
        if not cell.get('outputs'):
            continue
        row['cells'] += 1
        name, tags = label(cell, number), cell['metadata'].get('tags', [])
        if 'nbval-ignore-output' in tags or 'nbval-skip' in tags:
            reason = cell['metadata'].get('d2lzh', {}).get('ignore', '')
            measures = bool(MEASUREMENT.search('\n'.join(compared_texts(cell))))
            row['nowhere'].append((name, reason, measures))
            continue
        row['measured'] += 'measured' in tags
        if is_figure(cell):
            row['figure'].append(name)
        elif 'stored-data' in tags or (on_gpus and 'stored-machine' in tags):
            row['gpu'].append(name)
        else:
            row['cpu'].append(name)
    return row


def not_in_ci(rows):
    """'path [3] [5]; path [7]': the text cells of ``rows`` ({path: row}) CI does not compare."""
    parts = [f'{path} ' + ' '.join(row['gpu'] + [name for name, _, _ in row['nowhere']])
             for path, row in rows.items() if row['gpu'] or row['nowhere']]
    return '；'.join(parts)


def ci_goal(edition, rows):
    """The problem of ``edition``'s CI goal (MXNET_CI_SHARE, PYTORCH_CI_SHARE), or None."""
    name = f'{edition.upper()}_CI_SHARE'
    goal = globals()[name]
    cells = sum(r['cells'] for r in rows.values())
    total = cells - sum(len(r['figure']) for r in rows.values()) if edition == 'mxnet' else cells
    cpu = sum(len(r['cpu']) for r in rows.values())
    if cpu >= goal * total:
        return None
    what = '有文字输出的单元格（图除外）' if edition == 'mxnet' else '有输出的单元格（图计入总数，不算比较过）'
    return (f'{name}：{edition} 版 CI 在 CPU 上比较了 {cpu}/{total} 个{what}（{cpu / total:.1%}），'
            f'目标至少 {goal:.0%}，还差 {math.ceil(goal * total) - cpu} 个。要移到 CI 的单元格'
            f'（现在只在 make test-gpu 里比较或哪里都不比较）：{not_in_ci(rows)}')


def goal_problems(editions=project.EDITIONS):
    """{goal: [problem, ...]} for every goal of GOALS over ``editions`` (an empty list: met),
    and {edition: {path: row}} as classify gives them."""
    problems, tables = {goal: [] for goal in GOALS}, {}
    for edition in editions:
        rows = tables[edition] = {path: classify(path) for path in project.notebooks(edition)}
        cells = sum(r['cells'] for r in rows.values())
        nowhere = sum(len(r['nowhere']) for r in rows.values())
        if nowhere > NOWHERE_LIMIT * cells:
            ignored = '；'.join(f'{p} ' + ' '.join(n for n, _, _ in r['nowhere'])
                               for p, r in rows.items() if r['nowhere'])
            problems['NOWHERE_LIMIT'].append(
                f'NOWHERE_LIMIT：{edition} 版 {nowhere}/{cells} 个有输出的单元格（{nowhere / cells:.1%}）'
                f'哪里都不比较，目标至多 {NOWHERE_LIMIT:.0%}。这些单元格：{ignored}')
        for path, row in rows.items():
            for name, reason, measures in row['nowhere']:
                if not reason:  # part of the NOWHERE_LIMIT goal: each ignored cell says why
                    problems['NOWHERE_LIMIT'].append(
                        f'{path}：单元格 {name} 被忽略，却没有在 metadata d2lzh.ignore 里写原因')
                if measures:
                    problems[MEASURED_NEVER_IGNORED].append(
                        f'{MEASURED_NEVER_IGNORED}：{path} 的单元格 {name} 打印了测量值，却整个被'
                        '忽略：改标 measured（数字被掩码，文字仍然比较）')
        problem = ci_goal(edition, rows)
        if problem:
            problems[f'{edition.upper()}_CI_SHARE'].append(problem)
    return problems, tables


def pad(text, width):
    """``text`` right-aligned in ``width`` terminal columns (a Chinese character takes two)."""
    wide = sum(unicodedata.east_asian_width(ch) in 'WF' for ch in str(text))
    return str(text).rjust(width - wide)


def report():
    """Print the table and every missed goal; return the problems (a list of str)."""
    problems, tables = goal_problems()
    columns = ('cells', 'cpu', 'gpu', 'figure', 'nowhere', 'measured')
    widths = (8, 10, 12, 6, 10, 6)
    print('笔记本'.ljust(45) + ''.join(pad(h, w) for h, w in zip(
        ('有输出', 'CI（CPU）', '仅 test-gpu', '图', '哪里都不', '掩码'), widths)))
    for edition, rows in tables.items():
        total = dict.fromkeys(columns, 0)
        for path, row in rows.items():
            counts = {k: v if isinstance(v, int) else len(v) for k, v in row.items()}
            print(f'{path:48}' + ''.join(pad(counts[k], w) for k, w in zip(columns, widths)))
            for name, reason, _ in row['nowhere']:
                print(f'    单元格 {name}：{reason or "（没有写原因）"}')
            total = {k: total[k] + counts[k] for k in total}
        cells = max(total['cells'], 1)
        print(f'{edition} 版'.ljust(47) + ''.join(pad(total[k], w) for k, w in zip(columns, widths))
              + f'   CI：{total["cpu"] / cells:.1%}，哪里都不：{total["nowhere"] / cells:.1%}')
    missed = [p for goal in GOALS for p in problems[goal]]
    for problem in missed:
        print('没有达到目标：' + problem)
    return missed


if __name__ == '__main__':
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--check', action='store_true', help='没有达到目标时以 1 退出')
    args = parser.parse_args()
    sys.exit(1 if report() and args.check else 0)
