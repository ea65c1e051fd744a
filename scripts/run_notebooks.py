"""Execute the chapter notebooks top to bottom and summarise what they measured.

Used by ``make run`` (and, with ``--stored``, by ``make html``). Each edition
and each kind of rendering has its own folder, so no run overwrites another's
results::

    build/run/summary.md                  every notebook ever run into build/, both editions
    build/run/<edition>/NAME.ipynb        the executed copy (notebooks/ is never modified)
    build/run/<edition>/NAME.html         its HTML rendering (math from ./mathjax/)
    build/run/<edition>/results/NAME.json the run's status, wall time and figures
    build/stored/<edition>/NAME.html      --stored: the stored notebook, not executed

``<edition>`` is the notebook's edition in the registry :mod:`d2lzh.project`
(for any other notebook: ``pytorch`` in a folder named ``pytorch``, else
``mxnet``). Without notebooks it runs the MXNet edition's. The summary table lists
every notebook whose results are in ``build/run/`` (scripts/run_summary.py), with the figures it
recorded with ``d2l.record`` and what those figures mean on this machine.
Exits with status 1 if a notebook failed, naming the notebook and the cell as
Jupyter shows it: ``[4]`` and the first line of its source.

    python scripts/run_notebooks.py [NOTEBOOK ...] [--build build] [--timeout S]
    python scripts/run_notebooks.py --stored [NOTEBOOK ...] [--build build]
"""
import argparse
import copy
import datetime
import json
import logging
import os
import re
import shutil
import sys
import time
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
TEMPLATES = Path(__file__).resolve().parent / 'html_template'
sys.path[:0] = [str(ROOT), str(ROOT / 'scripts')]
from d2lzh import project  # noqa: E402
from d2lzh.results import read_figures  # noqa: E402
from run_summary import load_rows, summary_markdown  # noqa: E402

MATHJAX_CONFIG = 'TeX-AMS-MML_HTMLorMML-full,Safe'
# A chart's title in a cell's source: title='...', set_title(f'...'), suptitle('...').
CHART_TITLE = re.compile(r"""(?:\btitle\s*=|title\()\s*f?(['"])(.+?)\1""")


class UsageError(Exception):
    """A bad command line; the message is one line that lists the valid choices."""


def edition_of(path):
    """The edition (``'mxnet'`` or ``'pytorch'``) of a project notebook; for any other
    notebook ``'pytorch'`` in a folder named ``pytorch``, else ``'mxnet'``."""
    nb = project.find(Path(path).resolve().as_posix())
    if nb is not None:
        return nb.edition
    return 'pytorch' if Path(path).parent.name == 'pytorch' else 'mxnet'


def check_notebooks(paths):
    """Raise :class:`UsageError` unless every path is an existing ``.ipynb``
    file and no two of them would write to the same output files."""
    valid = ' '.join(project.notebooks('all'))
    bad = [str(p) for p in paths if p.suffix != '.ipynb' or not p.is_file()]
    if bad:
        raise UsageError(f'not a notebook: {" ".join(bad)}; valid: {valid}')
    seen = {}
    for p in paths:
        key = (edition_of(p), p.stem)
        if key in seen and seen[key] != p.resolve():
            raise UsageError(f'{seen[key]} and {p} would both write build/run/{key[0]}/'
                             f'{key[1]}.*: run them separately or rename one')
        seen[key] = p.resolve()


# ---------------------------------------------------------------- cells
def first_line(cell):
    """The first line of a cell's source that is not blank or an nbval marker."""
    for line in cell.get('source', '').splitlines():
        if line.strip() and not re.match(r'\s*#\s*NBVAL_', line):
            return line.strip()
    return ''


def cell_label(cell):
    """How a cell is named in every message: ``cell [4] "first line"``.

    ``[4]`` is the execution count Jupyter shows beside the cell (``[ ]``
    when it has none), the text the first line of its source.
    """
    count = cell.get('execution_count')
    return f'cell [{count if count is not None else " "}] "{first_line(cell)}"'


def _failing_cell(nb):
    """The first code cell with an error output (not tagged raises-exception)
    and the error, or (None, '')."""
    for cell in nb.cells:
        if cell.cell_type != 'code':
            continue
        tags = cell.metadata.get('tags', [])
        for out in cell.get('outputs', []):
            if out.get('output_type') == 'error' and 'raises-exception' not in tags:
                return cell, f"{out.get('ename')}: {out.get('evalue')}"
    return None, ''


# ---------------------------------------------------------------- HTML
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


def _add_alt_texts(nb):
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
            else:
                alt = f'图：{cell_label(cell)} 画出的图（{section}）'
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


def ensure_mathjax(folder):
    """Copy MathJax next to the pages in ``folder`` (once) and return the
    relative URL the pages load it from.

    Raises:
        RuntimeError: jupyter-server-mathjax is not installed (the message
            says how to install it).
    """
    source = _mathjax_source()
    if source is None:
        raise RuntimeError('the HTML pages need MathJax from the package jupyter-server-mathjax '
                           '(pinned in requirements.txt): run `make venv` or '
                           '`.venv/bin/pip install -r requirements.txt`')
    target = folder / 'mathjax'
    if not (target / 'MathJax.js').is_file():
        # Everything but the SVG output (HTML-CSS is the renderer configured).
        shutil.copytree(source, target, dirs_exist_ok=True, copy_function=_link_or_copy,
                        ignore=lambda d, names: ['SVG'] if Path(d).name == 'output' else [])
    return f'mathjax/MathJax.js?config={MATHJAX_CONFIG}'


def render_html(nb, dest):
    """Write ``nb`` as a self-contained HTML page ``dest`` that works offline.

    The page is titled with the notebook's first heading (with "（PyTorch）" added
    for the PyTorch edition, whose sections share the MXNet titles), loads MathJax from
    ``mathjax/`` next to it (copied there from the pinned package), loads
    nothing from a CDN, and every image has an alt text. nbconvert's own
    warnings (e.g. about missing alt texts) are turned into errors, so none
    can pass unnoticed.
    """
    from nbconvert import HTMLExporter

    dest.parent.mkdir(parents=True, exist_ok=True)
    nb = copy.deepcopy(nb)
    _add_alt_texts(nb)
    exporter = HTMLExporter(template_name='d2lzh', extra_template_basedirs=[str(TEMPLATES)],
                            mathjax_url=ensure_mathjax(dest.parent), language_code='zh-CN')
    warned = []

    class _Collect(logging.Handler):
        def emit(self, rec):
            if rec.levelno >= logging.WARNING:
                warned.append(rec.getMessage())

    handler = _Collect()
    exporter.log.addHandler(handler)
    title = notebook_title(nb, dest.stem)
    if dest.parent.name == 'pytorch':  # the two editions share their section titles
        title += '（PyTorch）'
    try:
        body, _ = exporter.from_notebook_node(nb, resources={'metadata': {'name': title}})
    finally:
        exporter.log.removeHandler(handler)
    if warned:
        raise RuntimeError(f'nbconvert warned while rendering {dest.name}: ' + '; '.join(warned))
    dest.write_text(body, encoding='utf-8')


# ---------------------------------------------------------------- running
def run_one(path, build, timeout):
    """Execute one notebook into ``build/run/<edition>/``.

    Returns:
        dict: ``notebook`` (the path given), ``edition``, ``name``, ``status``
        (``'ok'`` or ``'FAILED'``), ``seconds``, ``finished`` (UTC,
        ``YYYY-MM-DD HH:MM``), ``cpu_cores``, ``figures`` (see ``d2lzh.results.read_figures``)
        and ``error`` (one line, empty when ok). Also written to
        ``results/NAME.json``.
    """
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError, CellTimeoutError

    edition, name = edition_of(path), path.stem
    out_dir = build / 'run' / edition
    results_dir = out_dir / 'results'
    results_dir.mkdir(parents=True, exist_ok=True)
    figures_file = results_dir / f'{name}.jsonl'
    if figures_file.exists():
        figures_file.unlink()
    os.environ['D2LZH_RESULTS'] = str(figures_file)
    work = nbformat.read(path, as_version=4)
    for cell in work.cells:
        if cell.cell_type == 'code':
            cell.outputs, cell.execution_count = [], None
    client = NotebookClient(work, timeout=timeout, kernel_name='python3',
                            resources={'metadata': {'path': str(path.resolve().parent)}})
    start = time.perf_counter()
    status, error = 'ok', ''
    try:
        client.execute()
    except (CellExecutionError, CellTimeoutError) as err:
        cell, what = _failing_cell(work)
        if cell is None:  # a timeout leaves no error output
            text = str(err).strip()
            what = text.splitlines()[-1] if text else type(err).__name__
            cell = next((c for c in reversed(work.cells) if c.cell_type == 'code'
                         and c.get('execution_count') is not None), None)
        status = 'FAILED'
        where = cell_label(cell) if cell is not None else 'its first cell'
        error = f'{path} failed in {where}: {what}'
    except Exception as err:  # kernel died, could not start, ...
        status, error = 'FAILED', f'{path}: {type(err).__name__}: {err}'
    finally:
        del os.environ['D2LZH_RESULTS']
    seconds = time.perf_counter() - start
    nbformat.write(work, out_dir / f'{name}.ipynb')
    (out_dir / f'{name}.html').unlink(missing_ok=True)  # never leave an earlier run's page
    try:
        render_html(work, out_dir / f'{name}.html')
    except Exception as err:  # the run's result counts more than its rendering
        print(f'  warning: no HTML for {path}: {err}', file=sys.stderr, flush=True)
    row = {'notebook': str(path), 'edition': edition, 'name': name, 'status': status,
           'seconds': round(seconds, 1), 'cpu_cores': os.cpu_count(),
           'finished': datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%d %H:%M'),
           'figures': read_figures(figures_file), 'error': error}
    (results_dir / f'{name}.json').write_text(json.dumps(row, ensure_ascii=False, indent=1),
                                              encoding='utf-8')
    return row


# ---------------------------------------------------------------- main
def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('notebooks', nargs='*', type=Path,
                        help="notebooks to run (default: the MXNet edition's)")
    parser.add_argument('--build', type=Path, default=ROOT / 'build')
    parser.add_argument('--timeout', type=int, default=1800, help='seconds per cell')
    parser.add_argument('--stored', action='store_true',
                        help='only render the stored notebooks to build/stored/<edition>/')
    args = parser.parse_args(argv)
    notebooks = args.notebooks or [ROOT / path for path in project.notebooks('mxnet')]
    try:
        check_notebooks(notebooks)
    except UsageError as err:
        print(f'error: {err}', file=sys.stderr)
        return 2
    # The kernels run in the notebooks' folders: give them absolute paths.
    build = args.build.resolve()
    if args.stored:
        for path in notebooks:
            dest = build / 'stored' / edition_of(path) / f'{path.stem}.html'
            render_html(nbformat.read(path, as_version=4), dest)
            print(f'{path} -> {dest.relative_to(build.parent)}')
        return 0
    # The kernel must be this interpreter's (the project's venv), whatever PATH says.
    os.environ['PATH'] = str(Path(sys.executable).parent) + os.pathsep + os.environ['PATH']
    os.environ.setdefault('PYTHONUNBUFFERED', '1')
    rows = []
    total = time.perf_counter()
    for path in notebooks:
        print(f'running {path} ...', flush=True)
        row = run_one(path, build, args.timeout)
        print(f"  {row['status']} in {row['seconds']:.0f} s", flush=True)
        if row['error']:
            print('  ' + row['error'], flush=True)
        rows.append(row)
    total = time.perf_counter() - total
    summary = summary_markdown(load_rows(build))
    (build / 'run').mkdir(parents=True, exist_ok=True)
    (build / 'run' / 'summary.md').write_text(summary, encoding='utf-8')
    rel = os.path.relpath(build, Path.cwd()) if build.is_relative_to(Path.cwd()) else build
    print('\n' + summary)
    print(f'This run: {len(rows)} notebook(s) in {total:.0f} s. Executed notebooks and HTML: '
          f'{rel}/run/<edition>/, summary of every run kept there: {rel}/run/summary.md')
    failed = [r for r in rows if r['status'] != 'ok']
    for r in failed:
        print('FAILED: ' + r['error'], file=sys.stderr)
    return 1 if failed else 0


if __name__ == '__main__':
    sys.exit(main())
