"""docs/book-coverage.md lists every experiment and exercise of the book's 4.6 and 8.1-8.5
with the cell of each edition that runs it; this checks the list against the notebooks: the
named heading exists, code follows it, and that code has a stored output. Its column 回答 says per
edition whether the stored output answers each exercise in full ("已回答") or what is missing
("部分：..."); the counts per edition are checked against ANSWERED."""
import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
COVERAGE = ROOT / 'docs' / 'book-coverage.md'
# a table cell naming a notebook's cell group: [file](../notebooks/...ipynb) › heading text
REF = re.compile(r'\[[^\]]+\]\(\.\./(notebooks/[^)]+\.ipynb)\) › (.+)')
EXERCISES = {'4.6': 2, '8.1': 3, '8.2': 1, '8.3': 3, '8.4': 2, '8.5': 2}
# exercises whose stored output answers the book's question in full, per edition (13 in all);
# 8.4 exercise 1 and 8.5 exercise 1 are answered only in part in both (see their 回答 cells)
ANSWERED = {'mxnet': 13, 'pytorch': 13}
# a 回答 cell: MXNet：<verdict>；PyTorch：<verdict>, a verdict being 已回答 (with an optional note
# in brackets) or 部分：<what is missing>
ANSWER = re.compile(r'MXNet：(?P<mxnet>已回答(?:（.+?）)?|部分：.+?)；PyTorch：(?P<pytorch>已回答(?:（.+）)?|部分：.+)')


def _rows():
    rows = []
    for line in COVERAGE.read_text(encoding='utf-8').splitlines():
        cells = [c.strip() for c in line.strip().strip('|').split('|')]
        if len(cells) >= 6 and re.fullmatch(r'\d\.\d', cells[0]):
            rows.append(cells)
    return rows


def _answer_column():
    for line in COVERAGE.read_text(encoding='utf-8').splitlines():
        cells = [c.strip() for c in line.strip().strip('|').split('|')]
        if cells[0] == '节':
            assert '回答' in cells, 'the table has no column 回答'
            return cells.index('回答')
    raise AssertionError('docs/book-coverage.md has no table header')


def _verdicts():
    """{(section, exercise): {'mxnet': verdict, 'pytorch': verdict}} from the column 回答."""
    column, verdicts = _answer_column(), {}
    for row in _rows():
        if row[1].startswith('练习'):
            m = ANSWER.fullmatch(row[column])
            assert m, f'{row[0]} {row[1]}: 回答 must read "MXNet：...；PyTorch：...", got {row[column]!r}'
            verdicts[row[0], row[1]] = m.groupdict()
    return verdicts


def _headings(cell):
    """(level, text) of every Markdown heading line of ``cell``."""
    if cell['cell_type'] != 'markdown':
        return []
    lines = ''.join(cell['source']).splitlines()
    return [(len(ln) - len(ln.lstrip('#')), ln.lstrip('#').strip())
            for ln in lines if ln.startswith('#')]


def _group(path, heading):
    """The code cells after ``heading`` up to the next heading of the same or a higher level."""
    cells = json.loads((ROOT / path).read_text(encoding='utf-8'))['cells']
    for i, cell in enumerate(cells):
        levels = [lv for lv, text in _headings(cell) if text == heading]
        if levels:
            group = []
            for later in cells[i + 1:]:
                if any(lv <= levels[0] for lv, _ in _headings(later)):
                    break
                if later['cell_type'] == 'code':
                    group.append(later)
            return group
    return None


def test_every_exercise_of_the_book_is_listed_for_both_editions():
    counts = {}
    for section, what, *_ in _rows():
        if what.startswith('练习'):
            counts[section] = counts.get(section, 0) + 1
    assert counts == EXERCISES


@pytest.mark.parametrize('row', _rows(), ids=lambda r: f'{r[0]} {r[1][:20]}')
def test_listed_cells_run_code_with_a_stored_output(row):
    for column in (row[2], row[3]):
        m = REF.fullmatch(column)
        assert m, f'{column!r}: name the cell as [file](../notebooks/...ipynb) › heading'
        group = _group(m.group(1), m.group(2))
        assert group is not None, f'{m.group(1)} has no heading {m.group(2)!r}'
        assert any(''.join(c['source']).strip() for c in group), \
            f'{m.group(1)} › {m.group(2)}: no code under the heading'
        assert any(c.get('outputs') for c in group), \
            f'{m.group(1)} › {m.group(2)}: no stored output under the heading'


def test_rows_that_are_not_exercises_have_no_verdict():
    column = _answer_column()
    for row in _rows():
        if not row[1].startswith('练习'):
            assert row[column] == '—', f'{row[0]} {row[1]}: not an exercise, 回答 should be —'


def test_every_exercise_has_a_verdict_for_both_editions():
    verdicts = _verdicts()
    assert len(verdicts) == sum(EXERCISES.values())
    for (section, what), v in verdicts.items():
        for edition, verdict in v.items():
            assert verdict.startswith('已回答') or len(verdict) > len('部分：') + 4, \
                f'{section} {what}, {edition}: say what is missing'


def test_exercises_answered_in_full_per_edition():
    answered = {'mxnet': 0, 'pytorch': 0}
    for v in _verdicts().values():
        for edition, verdict in v.items():
            answered[edition] += verdict.startswith('已回答')
    assert answered == ANSWERED


def test_quoted_four_gpu_figures_match_their_source():
    """MXNet 06 quotes the PyTorch edition's 1/2/4-GPU bench (it cannot run on those GPUs):
    the figures in its Markdown are those of the JSON it names."""
    import nbformat
    run = json.loads((ROOT / 'bench/results/NVIDIA-H200-x4-2026-11-27.json').read_text())
    text = ''.join(c.source for c in nbformat.read(
        ROOT / 'notebooks/06_multiple-gpus-gluon.ipynb', 4).cells if c.cell_type == 'markdown')
    weak = [run['weak'][k] for k in ('1', '2', '4')]
    assert '、'.join(f"{w['images_per_s']['mean']:,.0f}" for w in weak) in text
    assert f"每秒 {run['best_single']['images_per_s']['mean']:,.0f} 张" in text
    assert '、'.join(f"{run[f'ddp{k}_vs_best_single']:.2f}" for k in (1, 2, 4)) in text
    assert '、'.join(f"{w['test_acc']['mean']:.3f}" for w in weak) in text


def test_quoted_two_gpu_batch_figures_match_the_pytorch_output():
    """MXNet 05 (no GPU) quotes PyTorch 05's two-GPU timing of 8.4 exercise 1: the speed-ups
    it names are those printed in PyTorch 05's stored output."""
    import nbformat
    def text(path, kind):
        cells = nbformat.read(ROOT / path, 4).cells
        if kind == 'markdown':
            return ''.join(c.source for c in cells if c.cell_type == 'markdown')
        return ''.join(o.get('text', '') for c in cells if c.cell_type == 'code'
                       for o in c.get('outputs', []))
    quoted = re.search(r'批量翻倍后训练同样多的图像快了 (\S+) 倍（范围 (\S+)）.*?速度之比是 (\S+)（范围 (\S+)）',
                       text('notebooks/05_multiple-gpus.ipynb', 'markdown'))
    printed = text('notebooks/pytorch/05_multiple-gpus.ipynb', 'code')
    assert quoted and f'训练同样多的图像快了 {quoted[1]} 倍（10 次重复的中位数，范围 {quoted[2]}）' in printed
    assert f'速度之比 {quoted[3]}（10 次重复的中位数，范围 {quoted[4]}）' in printed
