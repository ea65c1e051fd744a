"""Join soft line breaks between Chinese characters in the notebooks' Markdown cells.

A line break inside a Markdown paragraph is rendered as a space; between two
Chinese characters that space is a visible gap in JupyterLab and in the HTML
pages. This script joins such lines: only inside ordinary paragraphs, only
where both sides of the break are CJK characters, or one side is full-width
punctuation (，。：“ ...), after or before which a space is never wanted.
The continuation lines of a list item are joined the same way.
Headings, block quotes, tables, HTML, code (fenced or indented),
display math and hard line breaks (two trailing spaces or a backslash) are
left as they are. Running it twice changes nothing the second
time. Beyond the book.

    python scripts/tidy_markdown.py                 # every notebook, in place
    python scripts/tidy_markdown.py --check         # list what would change; exit 1 if any
    python scripts/tidy_markdown.py notebooks/02_hybridize.ipynb ...
"""
import argparse
import re
import sys
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from d2lzh import project  # noqa: E402

# CJK ideographs, kana, CJK and full-width punctuation, and the curly quotes,
# dash, ellipsis and middle dot of Chinese text.
CJK = ('\u2e80-\u2fdf\u3000-\u303f\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff'
       '\uf900-\ufaff\ufe30-\ufe4f\uff00-\uffef\u2018\u2019\u201c\u201d\u2014\u2026\u00b7')
# Full-width punctuation: a space after or before it is always a stray one.
PUNCT = '\u3000-\u303f\uff01-\uff0f\uff1a-\uff20\uff3b-\uff40\uff5b-\uff65\u201c\u201d\u2014\u2026'
ENDS_CJK = re.compile(f'[{CJK}]$')
STARTS_CJK = re.compile(f'^[{CJK}]')
ENDS_PUNCT = re.compile(f'[{PUNCT}]$')
STARTS_PUNCT = re.compile(f'^[{PUNCT}]')
HEADING = re.compile(r'^\s{0,3}#{1,6}(\s|$)')
FENCE = re.compile(r'^\s{0,3}(`{3,}|~{3,})')
# A line that starts a block of its own: heading, list item, quote, table row,
# HTML, display math, thematic break / setext underline.
BLOCK_START = re.compile(r'^\s{0,3}(#{1,6}(\s|$)|[-*+]\s|\d{1,9}[.)]\s|>|\||<|\$\$|'
                         r'([-*_=]\s*){3,}$)')
# A list item, also a nested (indented) one.
LIST_ITEM = re.compile(r'^\s*([-*+]|\d{1,9}[.)])\s')


def tidy(text):
    """Return ``text`` (one Markdown cell) with the soft breaks between CJK
    characters of its ordinary paragraphs removed."""
    out = []
    fence = None       # the fence string while inside fenced code
    in_math = False    # inside a $$ ... $$ display block
    kind = None        # what the current block is: 'para', 'other' or None (after a blank)
    for line in text.split('\n'):
        stripped = line.strip()
        if fence is not None:
            out.append(line)
            if stripped.startswith(fence):
                fence, kind = None, None
            continue
        m = FENCE.match(line)
        if m:
            fence, kind = m.group(1), 'other'
            out.append(line)
            continue
        if in_math or stripped.startswith('$$'):
            # a display-math block: $$ alone or $$...$$ on one line
            closes = stripped.count('$$') % 2 == 1
            in_math = in_math != closes
            kind = 'other'
            out.append(line)
            continue
        if not stripped:
            kind = None
            out.append(line)
            continue
        # a list item; inside a paragraph only one that starts a block (indented 0-3)
        is_item = bool(LIST_ITEM.match(line)) and (kind != 'para' or bool(BLOCK_START.match(line)))
        starts_block = (bool(BLOCK_START.match(line)) or is_item
                        or (kind is None and line.startswith('    ')))
        if kind in ('para', 'item') and not starts_block:
            prev = out[-1]
            hard_break = prev.endswith(('  ', '\\'))
            nxt = line.lstrip()
            cjk_both = ENDS_CJK.search(prev) and STARTS_CJK.match(nxt)
            if not hard_break and (cjk_both or ENDS_PUNCT.search(prev) or STARTS_PUNCT.match(nxt)):
                out[-1] = prev + nxt
                continue
            out.append(line)
            continue
        if is_item:
            kind = 'item'
        else:
            kind = 'other' if starts_block or kind == 'other' else 'para'
        if HEADING.match(line):  # a heading is one line: a paragraph may follow directly
            kind = None
        out.append(line)
    return '\n'.join(out)


def tidy_notebook(path, write=True):
    """Tidy every Markdown cell of one notebook.

    Args:
        path (str or os.PathLike): the ``.ipynb`` file.
        write (bool): write the file back when something changed.

    Returns:
        list of int: indices (0-based, among all cells) of the cells changed.
    """
    nb = nbformat.read(path, as_version=4)
    changed = []
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == 'markdown':
            new = tidy(cell.source)
            if new != cell.source:
                cell.source = new
                changed.append(i)
    if changed and write:
        nbformat.write(nb, path)
    return changed


def project_notebooks():
    """Every notebook of both editions (paths under ROOT), from :mod:`d2lzh.project`."""
    return [ROOT / path for path in project.notebooks('all')]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('notebooks', nargs='*', type=Path,
                        help='default: every notebook of both editions')
    parser.add_argument('--check', action='store_true',
                        help='change nothing; list the cells that would change, exit 1 if any')
    args = parser.parse_args(argv)
    paths = args.notebooks or project_notebooks()
    missing = [str(p) for p in paths if not p.is_file()]
    if missing:
        print(f'error: no such notebook: {" ".join(missing)}', file=sys.stderr)
        return 2
    todo = 0
    for path in paths:
        changed = tidy_notebook(path, write=not args.check)
        if changed:
            todo += len(changed)
            verb = 'would join lines in' if args.check else 'joined lines in'
            print(f'{path}: {verb} markdown cell(s) {", ".join(map(str, changed))}')
    return 1 if args.check and todo else 0


if __name__ == '__main__':
    sys.exit(main())
