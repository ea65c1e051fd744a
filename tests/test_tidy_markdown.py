"""scripts/tidy_markdown.py: no stray spaces inside Chinese paragraphs."""
import sys
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / 'scripts'))
import tidy_markdown  # noqa: E402

NOTEBOOKS = tidy_markdown.project_notebooks()


@pytest.mark.parametrize('before, after', [
    # a paragraph: joined where both sides are CJK or one side is full-width punctuation
    ('第一行的结尾\n第二行开头', '第一行的结尾第二行开头'),
    ('它返回，\nPython 继续', '它返回，Python 继续'),
    ('GPU\n（图形处理器）', 'GPU（图形处理器）'),
    ('三行\n连成\n一行。', '三行连成一行。'),
    ('  缩进的续行\n    也算', '  缩进的续行也算'),
    # a Latin side stays a space, as in mixed Chinese-English text
    ('用 GPU\n计算', '用 GPU\n计算'),
    ('计算\nGPU 上', '计算\nGPU 上'),
    # hard line breaks stay
    ('两个空格  \n换行', '两个空格  \n换行'),
    ('反斜杠\\\n换行', '反斜杠\\\n换行'),
    # paragraphs, headings, quotes, tables, code and math are left alone
    ('段落一\n\n段落二', '段落一\n\n段落二'),
    ('# 标题\n正文', '# 标题\n正文'),
    ('## 标题\n正文第一行\n第二行', '## 标题\n正文第一行第二行'),
    # a list item's continuation lines are joined like a paragraph; the items stay apart
    ('* 列表第一项\n  续行\n* 第二项', '* 列表第一项续行\n* 第二项'),
    ('1. 第一步\n   续行', '1. 第一步续行'),
    ('- 外层，\n  续行\n  - 内层\n    续行', '- 外层，续行\n  - 内层续行'),
    ('* item\n  continued', '* item\n  continued'),
    ('段落\n* 列表', '段落\n* 列表'),
    ('> 引用\n> 续行', '> 引用\n> 续行'),
    ('| 表 | 格 |\n|---|---|\n| 一 | 二 |', '| 表 | 格 |\n|---|---|\n| 一 | 二 |'),
    ('```\n代码\n注释\n```\n段落\n续行', '```\n代码\n注释\n```\n段落续行'),
    ('$$\n\\text{总}\n\\text{和}\n$$', '$$\n\\text{总}\n\\text{和}\n$$'),
    ('    缩进代码\n    第二行', '    缩进代码\n    第二行'),
])
def test_tidy(before, after):
    assert tidy_markdown.tidy(before) == after
    assert tidy_markdown.tidy(after) == after, 'running it twice changes nothing'


def test_script_changes_only_markdown_and_is_idempotent(tmp_path, capsys):
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_markdown_cell('# 标题\n\n第一行\n第二行'),
        nbformat.v4.new_code_cell('# 代码里的\n# 注释不动', execution_count=1),
        nbformat.v4.new_markdown_cell('English\nlines stay')])
    path = tmp_path / 'x.ipynb'
    nbformat.write(nb, path)
    assert tidy_markdown.main(['--check', str(path)]) == 1
    assert 'would join lines in markdown cell(s) 0' in capsys.readouterr().out
    assert nbformat.read(path, as_version=4) == nb, '--check writes nothing'
    assert tidy_markdown.main([str(path)]) == 0
    tidy = nbformat.read(path, as_version=4)
    assert tidy.cells[0].source == '# 标题\n\n第一行第二行'
    assert [c.source for c in tidy.cells[1:]] == [c.source for c in nb.cells[1:]]
    capsys.readouterr()
    assert tidy_markdown.main(['--check', str(path)]) == 0
    assert capsys.readouterr().out == ''
    assert tidy_markdown.main([str(tmp_path / 'nope.ipynb')]) == 2


@pytest.mark.parametrize('path', NOTEBOOKS, ids=[f'{p.parent.name}/{p.stem}' for p in NOTEBOOKS])
def test_chinese_paragraphs_have_no_stray_line_breaks(path):
    nb = nbformat.read(path, as_version=4)
    untidy = [i for i, c in enumerate(nb.cells)
              if c.cell_type == 'markdown' and tidy_markdown.tidy(c.source) != c.source]
    assert not untidy, (f'markdown cell(s) {untidy} break Chinese paragraphs with stray spaces: '
                        f'run `python scripts/tidy_markdown.py {path.relative_to(ROOT)}`')
