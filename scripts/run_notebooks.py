"""Execute the chapter notebooks top to bottom and summarise what they measured.

Used by ``make run``. For each notebook: executes a copy with a real Jupyter
kernel (the notebooks/ folder itself is never modified), writes the executed
copy to ``build/notebooks/`` and an HTML rendering to ``build/html/``, and
collects the key figures the notebook recorded with ``d2l.record``. Ends with
a summary table (also written to ``build/summary.md``). Exits with status 1
if any notebook failed, naming the notebook and the cell.

    python scripts/run_notebooks.py [NOTEBOOK ...] [--build build] [--timeout S]
"""
import argparse
import copy
import os
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError, CellTimeoutError

try:
    from nbconvert import HTMLExporter
except ImportError:  # the HTML rendering is optional
    HTMLExporter = None

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from d2lzh.results import read_results  # noqa: E402


def _failing_cell(nb):
    """Index and first source line of the first cell with an error output."""
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != 'code':
            continue
        tags = cell.metadata.get('tags', [])
        for out in cell.get('outputs', []):
            if out.get('output_type') == 'error' and 'raises-exception' not in tags:
                first = next((ln for ln in cell.source.splitlines()
                              if ln.strip() and not ln.startswith('#')), '')
                return i, first, f"{out.get('ename')}: {out.get('evalue')}"
    return None, '', ''


def run_one(path, build, timeout):
    """Execute one notebook; return a dict with status, seconds, figures, error."""
    name = path.stem
    results_file = build / 'results' / f'{name}.jsonl'
    results_file.parent.mkdir(parents=True, exist_ok=True)
    if results_file.exists():
        results_file.unlink()
    os.environ['D2LZH_RESULTS'] = str(results_file)
    nb = nbformat.read(path, as_version=4)
    work = copy.deepcopy(nb)
    for cell in work.cells:
        if cell.cell_type == 'code':
            cell.outputs, cell.execution_count = [], None
    client = NotebookClient(work, timeout=timeout, kernel_name='python3',
                            resources={'metadata': {'path': str(path.parent)}})
    start = time.perf_counter()
    status, error = 'ok', ''
    try:
        client.execute()
    except (CellExecutionError, CellTimeoutError) as err:
        index, line, what = _failing_cell(work)
        if index is None:
            what = str(err).strip().splitlines()[-1] if str(err).strip() else type(err).__name__
        status = 'FAILED'
        error = f'{path} failed in cell {index} ({line!r}): {what}'
    except Exception as err:  # kernel died, could not start, ...
        status, error = 'FAILED', f'{path}: {type(err).__name__}: {err}'
    seconds = time.perf_counter() - start
    (build / 'notebooks').mkdir(parents=True, exist_ok=True)
    nbformat.write(work, build / 'notebooks' / path.name)
    if HTMLExporter is not None:
        (build / 'html').mkdir(parents=True, exist_ok=True)
        body, _ = HTMLExporter().from_notebook_node(work)
        (build / 'html' / f'{name}.html').write_text(body, encoding='utf-8')
    del os.environ['D2LZH_RESULTS']
    return {'name': name, 'status': status, 'seconds': seconds,
            'figures': read_results(results_file), 'error': error}


def _fmt(value, unit):
    if isinstance(value, float):
        text = f'{value:.4g}'
    else:
        text = str(value)
    return f'{text} {unit}'.strip() if unit not in ('x',) else f'{text}x'


def summary_table(rows):
    """Markdown table: notebook, status, wall time (s), key figures."""
    lines = ['| notebook | status | wall time | key figures |', '|---|---|---|---|']
    for r in rows:
        figures = '; '.join(f'{k} = {_fmt(v, u)}' for k, (v, u) in r['figures'].items())
        lines.append(f"| {r['name']} | {r['status']} | {r['seconds']:.0f} s | {figures or '-'} |")
    return '\n'.join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('notebooks', nargs='*', type=Path,
                        help='notebooks to run (default: notebooks/*.ipynb)')
    parser.add_argument('--build', type=Path, default=ROOT / 'build')
    parser.add_argument('--timeout', type=int, default=1800, help='seconds per cell')
    args = parser.parse_args(argv)
    # The kernels run in the notebooks' folder: give them absolute paths.
    args.build = args.build.resolve()
    notebooks = args.notebooks or sorted((ROOT / 'notebooks').glob('*.ipynb'))
    if not notebooks:
        parser.error('no notebooks found')
    # The kernel must be this interpreter's (the project's venv), whatever PATH says.
    os.environ['PATH'] = str(Path(sys.executable).parent) + os.pathsep + os.environ['PATH']
    os.environ.setdefault('PYTHONUNBUFFERED', '1')
    rows = []
    total = time.perf_counter()
    for path in notebooks:
        print(f'running {path.name} ...', flush=True)
        row = run_one(path.resolve(), args.build, args.timeout)
        print(f"  {row['status']} in {row['seconds']:.0f} s", flush=True)
        if row['error']:
            print('  ' + row['error'], flush=True)
        rows.append(row)
    table = summary_table(rows)
    total = time.perf_counter() - total
    (args.build / 'summary.md').write_text(table + f'\n\nTotal: {total:.0f} s\n', encoding='utf-8')
    print('\n' + table)
    print(f'\nTotal: {total:.0f} s. Executed notebooks: {args.build}/notebooks, '
          f'HTML: {args.build}/html, this table: {args.build}/summary.md')
    failed = [r for r in rows if r['status'] != 'ok']
    for r in failed:
        print('FAILED: ' + r['error'], file=sys.stderr)
    return 1 if failed else 0


if __name__ == '__main__':
    sys.exit(main())
