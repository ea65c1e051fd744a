"""Render a notebook as an HTML page that works offline, with every link resolving.

Used by ``scripts/run_notebooks.py`` (``make run``, ``make html``) and by the run summary
(``scripts/run_summary.py``). A page loads MathJax from the one copy of its build area
(``build/run/mathjax/``, ``build/stored/mathjax/``), nothing from a CDN; every image has an
alt text; and a relative link of the notebook (``../docs/x.md``) is rewritten for the page's
folder: to the file's page in the repository (:func:`d2lzh.project.url`), or to a correct
relative path where the file is outside the repository or no repository URL is known.
"""
import copy
import html
import logging
import os
import re
import shutil
import sys
import urllib.parse
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TEMPLATES = Path(__file__).resolve().parent / 'html_template'
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
from d2lzh import project  # noqa: E402

MATHJAX_CONFIG = 'TeX-AMS-MML_HTMLorMML-full,Safe'
# A chart's title in a cell's source: title='...', set_title(f'...'), suptitle('...').
CHART_TITLE = re.compile(r"""(?:\btitle\s*=|title\()\s*f?(['"])(.+?)\1""")
# Every link of a page: href="..." and src="..." (nbconvert writes double quotes).
LINK = re.compile(r'(\s(?:href|src)=")([^"]*)(")')
SCHEME = re.compile(r'^[A-Za-z][A-Za-z0-9+.-]*:')


def _heading(line):
    """The text of a Markdown heading line without its markup, or None."""
    m = re.match(r'\s{0,3}#{1,6}\s+(.*?)\s*#*\s*$', line)
    return re.sub(r'[`*_]', '', m.group(1)).strip() if m else None


def notebook_title(nb, default):
    """The text of the notebook's first Markdown heading, or ``default``."""
    for cell in nb.cells:
        if cell.cell_type == 'markdown':
            for title in map(_heading, cell.source.splitlines()):
                if title is not None:
                    return title or default
    return default


def _add_alt_texts(nb, cell_label):
    """Give every image output an alt text (in ``output.metadata.d2lzh_alt``):
    its text/plain form when that says something, else the chart titles in the
    cell's source (an f-string's fields shown as ``…``), else which cell drew it."""
    section = notebook_title(nb, '')
    for cell in nb.cells:
        if cell.cell_type == 'markdown':
            headings = [t for t in map(_heading, cell.source.splitlines()) if t is not None]
            section = headings[-1] if headings else section
            continue
        if cell.cell_type != 'code':
            continue
        for out in cell.get('outputs', []):
            data = out.get('data', {})
            if not any(k in data for k in ('image/png', 'image/jpeg')):
                continue
            plain = data.get('text/plain', '')
            if isinstance(plain, list):
                plain = ''.join(plain)
            titles = [re.sub(r'\{[^}]*\}', '…', t) for _, t in CHART_TITLE.findall(cell.source)]
            if plain and not re.match(r'<(Figure|IPython\.core\.display\.Image) ', plain):
                alt = plain.strip()
            elif titles:
                alt = f'图（{section}）：' + '；'.join(titles)
            else:  # a space after a label that ends in Latin text ("..."), none after Chinese
                label = cell_label(cell)
                alt = f'图：{label}{" " if label[-1:].isascii() else ""}画出的图（{section}）'
            out.setdefault('metadata', {})['d2lzh_alt'] = alt


def _mathjax_source():
    """The MathJax 2 folder of the pinned package jupyter-server-mathjax, or None."""
    import importlib.util
    spec = importlib.util.find_spec('jupyter_server_mathjax')
    if spec is None or not spec.submodule_search_locations:
        return None
    static = Path(next(iter(spec.submodule_search_locations))) / 'static'
    return static if (static / 'MathJax.js').is_file() else None


def _link_or_copy(src, dst):
    """Hard-link ``src`` to ``dst`` (no extra disk), or copy it where links fail."""
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def ensure_mathjax(area):
    """Copy MathJax into ``area/mathjax`` (once) and return that folder.

    Raises:
        RuntimeError: jupyter-server-mathjax is not installed (the message says how to
            install it).
    """
    target = Path(area) / 'mathjax'
    if (target / 'MathJax.js').is_file():
        return target
    source = _mathjax_source()
    if source is None:
        raise RuntimeError('HTML 网页要用 jupyter-server-mathjax 包里的 MathJax（requirements.txt '
                           '固定了这个包的版本），但它没有安装：请运行 `make venv` 或 '
                           '`.venv/bin/pip install -r requirements.txt`')
    # Everything but the SVG output (HTML-CSS is the renderer configured).
    shutil.copytree(source, target, dirs_exist_ok=True, copy_function=_link_or_copy,
                    ignore=lambda d, names: ['SVG'] if Path(d).name == 'output' else [])
    return target


def _relative(target, folder):
    """A URL path from ``folder`` to ``target`` (both absolute paths)."""
    return urllib.parse.quote(Path(os.path.relpath(target, folder)).as_posix())


def rewrite_links(page, source_dir, page_dir, name):
    """``page`` (HTML text) with every relative link resolving from ``page_dir``.

    A link to a file of ``source_dir`` (the notebook's folder) becomes the URL of that file
    in the repository (GitHub's page of it; a folder's page for a folder), or, outside the
    repository or without a known repository URL, a relative path from ``page_dir``. A link
    that resolves to the same file from both folders, or only from ``page_dir``
    (``mathjax/...``), is kept, as are anchors (``#...``) and absolute URLs.

    Raises:
        RuntimeError: a link leads nowhere from either folder (names ``name`` and the links).
    """
    broken = []

    def fix(m):
        url = html.unescape(m.group(2))
        if not url or url.startswith(('#', '/')) or SCHEME.match(url):
            return m.group(0)
        path, suffix = re.match(r'([^?#]*)(.*)', url, re.S).groups()  # suffix: ?... #...
        local = urllib.parse.unquote(path)
        target, here = (Path(source_dir) / local).resolve(), (Path(page_dir) / local).resolve()
        if here.exists() and (here == target or not target.exists()):
            return m.group(0)  # the same file, or one beside the page (MathJax)
        if not target.exists():
            broken.append(url)
            return m.group(0)
        new = None
        if target.is_relative_to(ROOT):
            new = project.url(target.relative_to(ROOT).as_posix(),
                              'tree' if target.is_dir() else 'blob')
        new = (new or _relative(target, page_dir)) + suffix
        return m.group(1) + html.escape(new, quote=True) + m.group(3)

    page = LINK.sub(fix, page)
    if broken:
        raise RuntimeError(f'{name} 的链接指向不存在的文件或文件夹：{"、".join(broken)}'
                           f'（相对于 {source_dir}）；请改正笔记本里的链接')
    return page


def render_html(nb, dest, source_dir, mathjax, page_dir=None, cell_label=None):
    """Write ``nb`` as a self-contained HTML page ``dest`` that works offline.

    Args:
        nb: the notebook (not modified).
        dest (Path): the file to write.
        source_dir (Path): the notebook's own folder (its relative links start there).
        mathjax (Path): the folder of MathJax (:func:`ensure_mathjax`).
        page_dir (Path or None): the folder the page will be read from, when it is written
            elsewhere first (``make run`` moves a page into place once its run succeeded);
            default ``dest.parent``. Links and MathJax are made relative to it.
        cell_label (callable or None): names a cell in generated alt texts.

    The page is titled with the notebook's first heading (with "（PyTorch）" added for a
    page of the folder ``pytorch``: the editions share their section titles), loads nothing from
    a CDN, every image has an alt text and every relative link resolves
    (:func:`rewrite_links`). nbconvert's own warnings (e.g. about missing alt texts) are
    turned into errors, so none can pass unnoticed.

    Raises:
        RuntimeError: nbconvert warned, or a link of the notebook leads nowhere.
    """
    from nbconvert import HTMLExporter

    page_dir = Path(page_dir or dest.parent)
    nb = copy.deepcopy(nb)
    _add_alt_texts(nb, cell_label or (lambda cell: '一个单元格'))
    url = f'{_relative(Path(mathjax) / "MathJax.js", page_dir)}?config={MATHJAX_CONFIG}'
    exporter = HTMLExporter(template_name='d2lzh', extra_template_basedirs=[str(TEMPLATES)],
                            mathjax_url=url, language_code='zh-CN')
    warned = []

    class _Collect(logging.Handler):
        def emit(self, rec):
            if rec.levelno >= logging.WARNING:
                warned.append(rec.getMessage())

    handler = _Collect()
    exporter.log.addHandler(handler)
    title = notebook_title(nb, dest.stem)
    if 'pytorch' in (page_dir.name, page_dir.parent.name):  # (and a failed attempt's page)
        title += '（PyTorch）'
    try:
        body, _ = exporter.from_notebook_node(nb, resources={'metadata': {'name': title}})
    finally:
        exporter.log.removeHandler(handler)
    if warned:
        raise RuntimeError(f'nbconvert 在生成 {dest.name} 时发出了警告：' + '；'.join(warned))
    body = rewrite_links(body, source_dir, page_dir, dest.stem)
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(body, encoding='utf-8')
