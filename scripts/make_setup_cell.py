"""Write the setup cell into every notebook, and the notebooks' cloud links into the docs.

Usage: ``python scripts/make_setup_cell.py`` (rewrite), ``--check`` (exit 1 and name the
files that are not up to date; change nothing).

The repository URL is written once, in pyproject.toml's ``[project.urls] Source``, and read
through :mod:`d2lzh.project`, as is the list of notebooks. From it this script derives the URL
the setup cell installs ``d2lzh`` from (GitHub's zip archive of the branch, so pip needs no
git), the table of Colab, Kaggle and SageMaker Studio Lab links in docs/cloud.md, and the
"Open in Colab" links of README's notebook tables. A fork changes that one line and runs
this script.

Every notebook gets the same first code cell (see :func:`setup_cell_source`), tagged
``nbval-ignore-output`` (what it prints depends on the machine). A notebook whose first code
cell is an older setup cell (it has the marker line) has it replaced; any other notebook gets
the setup cell inserted before its first code cell, which thus becomes the second and keeps
its own imports and outputs (e.g. ``d2l.setup_report()``). Running the script again changes
nothing.
"""
import argparse
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from d2lzh import project  # noqa: E402

MARKER = '# d2lzh setup cell'
CELL_ID = 'd2lzh-setup'
TAGS = ['nbval-ignore-output']          # the cell's metadata tags, read by nbval
CLOUD_DOC = ROOT / 'docs' / 'cloud.md'
README = ROOT / 'README.md'
LINKS_START = '<!-- cloud-links: written by scripts/make_setup_cell.py -->'
LINKS_END = '<!-- /cloud-links -->'
# A Colab link to one of the notebooks, whatever repository and branch it names.
COLAB_LINK = re.compile(r'https://colab\.research\.google\.com/github/[^)\s]*?/blob/[^)\s]*?/'
                        r'(notebooks/[\w./-]+?\.ipynb)')


def repository():
    """(owner, repo, branch) of the repository (:func:`d2lzh.project.repository`).

    Raises:
        SystemExit: pyproject.toml has no ``Source = "https://github.com/OWNER/REPO/tree/BRANCH"``.
    """
    repo = project.repository()
    if repo is None:
        raise SystemExit('pyproject.toml: [project.urls] needs a line '
                         'Source = "https://github.com/OWNER/REPO/tree/BRANCH"')
    return repo


def setup_cell_source():
    """The text of the setup cell (str), the same for every notebook of both editions."""
    owner, repo, branch = repository()
    archive = f'https://github.com/{owner}/{repo}/archive/refs/heads/{branch}.zip'
    return f'''{MARKER}：每个笔记本都一样，由 scripts/make_setup_cell.py 写入。
# 找不到 d2lzh 时（单独打开这个笔记本：Colab、Kaggle、SageMaker Studio Lab 或任何 Jupyter），
# 先用 pip 装上 d2lzh；之后第一次 `import mxnet` 或 `import torch` 时，再装上适合这台机器的
# 框架版本，并说明装了什么、为什么。已经装好 d2lzh 时（make run、make test、make lab）只导入它。
import importlib.util, os, subprocess, sys
if importlib.util.find_spec('d2lzh') is None:
    _source = os.environ.get('D2LZH_SOURCE') or '{archive}'
    print(f'这里没有装 d2lzh：用 pip 从 {{_source}} 安装', flush=True)
    _pip = subprocess.run([sys.executable, '-m', 'pip', 'install', '--quiet', _source],
                          capture_output=True, text=True)
    if _pip.returncode != 0:
        _lines = [l.strip() for l in _pip.stderr.splitlines()]
        _why = ([l for l in _lines if l.startswith('ERROR')]
                or [l for l in _lines if l.startswith('error')] or ['pip 失败'])
        raise SystemExit(f'pip 不能从 {{_source}} 安装 d2lzh：{{_why[0]}}\\n'
                         '请改正 D2LZH_SOURCE（pip 能安装的路径、wheel 或网址）或网络，'
                         '再运行这个单元格。')
    importlib.invalidate_caches()
import d2lzh.setup
d2lzh.setup.enable()'''


def notebooks():
    """Every notebook of both editions (paths under ROOT), in the registry's order."""
    return [ROOT / path for path in project.notebooks('all')]


def _source_lines(text):
    lines = text.split('\n')
    return [line + '\n' for line in lines[:-1]] + [lines[-1]]


def first_code_cell(nb):
    """The first code cell of a notebook (dict), or None."""
    return next((c for c in nb['cells'] if c['cell_type'] == 'code'), None)


def update_notebook(path, source):
    """Put the setup cell first; returns the new file text (equal to the old when current)."""
    old_text = path.read_text(encoding='utf-8')
    nb = json.loads(old_text)
    cell = {'cell_type': 'code', 'execution_count': None, 'id': CELL_ID,
            'metadata': {'tags': list(TAGS)}, 'outputs': [], 'source': _source_lines(source)}
    first = first_code_cell(nb)
    if first is not None and ''.join(first['source']) == source:
        tags = first.setdefault('metadata', {}).setdefault('tags', [])
        if all(t in tags for t in TAGS):
            return old_text
        tags += [t for t in TAGS if t not in tags]          # the rest of the cell is kept
        return json.dumps(nb, indent=1, ensure_ascii=False, sort_keys=True) + '\n'
    if first is not None and MARKER in ''.join(first['source']):
        cell['execution_count'] = first.get('execution_count')
        cell['outputs'] = []        # an older setup cell: its outputs are not this one's
        nb['cells'][nb['cells'].index(first)] = cell
    else:
        index = nb['cells'].index(first) if first is not None else len(nb['cells'])
        nb['cells'].insert(index, cell)
        _shift_execution_counts(nb, cell)
    if (nb.get('nbformat'), nb.get('nbformat_minor', 0)) < (4, 5):
        del cell['id']                                      # ids came with nbformat 4.5
    ids = [c.get('id') for c in nb['cells'] if c is not cell]
    if CELL_ID in ids:
        raise SystemExit(f'{path}: another cell already has the id {CELL_ID!r}')
    return json.dumps(nb, indent=1, ensure_ascii=False, sort_keys=True) + '\n'


def _shift_execution_counts(nb, cell):
    """Keep the stored run's numbering top-to-bottom: the setup cell, which prints nothing
    where d2lzh is installed, becomes execution 1 and every later count moves up by one."""
    counts = [c.get('execution_count') for c in nb['cells'] if c['cell_type'] == 'code'
              and c is not cell]
    if not counts or None in counts:
        return
    for c in nb['cells']:
        if c['cell_type'] == 'code' and c is not cell:
            c['execution_count'] += 1
            for out in c.get('outputs', []):
                if out.get('execution_count') is not None:
                    out['execution_count'] += 1
    cell['execution_count'] = min(counts)


def links_table():
    """docs/cloud.md's table: every notebook with its Colab, Kaggle and Studio Lab links."""
    rows = ['| notebook | section | Colab | Kaggle | SageMaker Studio Lab |',
            '|---|---|---|---|---|']
    for nb in project.NOTEBOOKS:
        blob = project.url(nb.path, 'blob')
        studio_lab = blob.replace('https://github.com/',
                                  'https://studiolab.sagemaker.aws/import/github/')
        label = nb.path.removeprefix('notebooks/').removesuffix('.ipynb')
        section = 'beyond the book' if nb.section == 'beyond' else nb.section
        rows.append(f'| [`{label}`](../{nb.path}) | {section} '
                    f'| [Open in Colab]({project.url(nb.path, "colab")}) '
                    f'| [Kaggle](https://kaggle.com/kernels/welcome?src={blob}) '
                    f'| [SageMaker Studio Lab]({studio_lab}) |')
    return '\n'.join(rows)


def update_cloud_doc(path=CLOUD_DOC):
    """docs/cloud.md with the links table between the markers; returns the new text."""
    text = path.read_text(encoding='utf-8')
    if LINKS_START not in text or LINKS_END not in text:
        raise SystemExit(f'{path}: missing the lines {LINKS_START} and {LINKS_END}')
    head, rest = text.split(LINKS_START, 1)
    _, tail = rest.split(LINKS_END, 1)
    return f'{head}{LINKS_START}\n{links_table()}\n{LINKS_END}{tail}'


def update_readme(path=README):
    """README with every notebook's Colab link pointing at the repository; returns the text.

    README's notebook tables are written by hand; this rewrites only the links' URLs.

    Raises:
        SystemExit: a notebook has no Colab link in README, or one that is not a notebook of
            the project (add or fix its row in the table).
    """
    text = path.read_text(encoding='utf-8')
    linked = COLAB_LINK.findall(text)
    missing = [p for p in project.notebooks('all') if p not in linked]
    unknown = [p for p in linked if project.find(p) is None or project.find(p).path != p]
    if missing or unknown:
        raise SystemExit(f'{path.name}: every notebook needs an "Open in Colab" link in the '
                         f'notebook tables; missing: {", ".join(missing) or "none"}; '
                         f'not a notebook: {", ".join(unknown) or "none"}')
    return COLAB_LINK.sub(lambda m: project.url(m.group(1), 'colab'), text)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--check', action='store_true',
                        help='only report files that are not up to date (exit 1 if any)')
    args = parser.parse_args(argv)
    source = setup_cell_source()
    targets = [(p, update_notebook(p, source)) for p in notebooks()]
    targets += [(CLOUD_DOC, update_cloud_doc()), (README, update_readme())]
    stale = []
    for path, new in targets:
        if path.read_text(encoding='utf-8') != new:
            stale.append(path.relative_to(ROOT).as_posix())
            if not args.check:
                path.write_text(new, encoding='utf-8')
    if args.check and stale:
        print('not up to date (run python scripts/make_setup_cell.py):', *stale, sep='\n  ')
        return 1
    if not args.check:
        print(f'{len(stale)} file(s) updated' + (': ' + ', '.join(stale) if stale else ''))
    return 0


if __name__ == '__main__':
    sys.exit(main())
