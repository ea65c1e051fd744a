"""Execute the chapter notebooks top to bottom and summarise what they measured.

Used by ``make run`` (and, with ``--stored``, by ``make html``). Each edition and each kind
of rendering has its own folder, so no run overwrites another's results::

    build/run/summary.md, .png, .html     every notebook run into build/, both editions
    build/run/history.jsonl               the figures of every successful run, appended
    build/run/<edition>/NAME.ipynb        the executed copy (notebooks/ is never modified)
                                          its links rewritten to resolve from there
    build/run/<edition>/NAME.html         its HTML rendering (MathJax from build/run/mathjax/)
    build/run/<edition>/NAME/             the files it wrote ($D2LZH_OUTPUT_DIR: traces ...)
    build/run/<edition>/results/NAME.json the run's wall time and figures (.jsonl: as recorded)
    build/run/<edition>/NAME.attempt/     a run that failed or was interrupted, as it ended
    build/stored/<edition>/NAME.html      --stored: the stored notebook, not executed

Nothing is ever lost: a notebook runs into ``NAME.attempt/`` and its results above replace
the previous ones only when every cell ran; a failed or interrupted (Ctrl-C) run leaves the
last good results as they were and says where the attempt's output is. An executed copy's
relative markdown links (``../docs/...``, ``pytorch/NAME.ipynb``) lead from the folder it is
kept in to the files they name, the stored notebooks included (:func:`relinked`). The kernel's
``TMPDIR`` is a folder of its own, removed after the notebook; its stderr (what C++ libraries
print there, e.g. the profiler's) goes to ``NAME.attempt/NAME.stderr.log``, kept only with a
failed attempt. ``<edition>`` is the notebook's edition in the registry :mod:`d2lzh.project`
(for any other notebook: ``pytorch`` in a folder named ``pytorch``, else ``mxnet``); without
notebooks it runs the MXNet edition's. Exits with 1 if a notebook failed (naming the cell as Jupyter shows it:
``[4]`` and the first line of its source) or a record broke the summary (naming the record and
the fix; the notebooks' results are kept), 130 when interrupted, 2 for a bad command line.

    python scripts/run_notebooks.py [NOTEBOOK ...] [--build build] [--timeout S]
    python scripts/run_notebooks.py --stored [NOTEBOOK ...] [--build build]
"""
import argparse
import contextlib
import copy
import datetime
import json
import os
import shutil
import signal
import sys
import tempfile
import time
import urllib.parse
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / 'scripts')]
from d2lzh import project  # noqa: E402
from execute import Progress, cell_label, execute  # noqa: E402,F401 (cell_label: conftest)
from lab import relink_markdown  # noqa: E402
from render_html import ensure_mathjax, notebook_title, render_html  # noqa: E402
from run_summary import HISTORY, history_entry, load_history, load_rows  # noqa: E402
from run_summary import SummaryError, check_rows, summary_lines, write_summary  # noqa: E402


class UsageError(Exception):
    """A bad command line; the message is one line that lists the valid choices."""


class BuildError(Exception):
    """The build folder cannot be written; the message is one line: what, where, the fix."""


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
        raise UsageError(f'不是存在的 .ipynb 笔记本：{" ".join(bad)}；可用的笔记本：{valid}')
    seen = {}
    for p in paths:
        key = (edition_of(p), p.stem)
        if key in seen and seen[key] != p.resolve():
            raise UsageError(f'{seen[key]} 和 {p} 都会写到 build/run/{key[0]}/{key[1]}.*：'
                             '请分开运行它们，或者给其中一个改名')
        seen[key] = p.resolve()


def rel(path):
    """``path`` relative to the working directory where it is inside it (for messages)."""
    path = Path(path)
    return os.path.relpath(path) if path.is_relative_to(Path.cwd()) else str(path)


def build_error(err, build):
    """The :class:`BuildError` for an OSError on a file inside ``build``, or None."""
    name = getattr(err, 'filename', None)
    if name is None or not Path(os.path.abspath(name)).is_relative_to(build):
        return None
    return BuildError(
        f'无法写入 {rel(name)}（{err.strerror or type(err).__name__}）：请让 {rel(build)} '
        f'成为你能写入的文件夹（例如 chmod -R u+w {rel(build)}），或者用 make BUILD=DIR'
        '（scripts/run_notebooks.py --build DIR）写到别处；之前各次运行的结果没有改变')


def check_writable(folder, build):
    """Create ``folder`` and a file in it, or raise :class:`BuildError`."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=folder, prefix='.writable-'):
            pass
    except OSError as err:
        raise (build_error(err, build) or err) from None


@contextlib.contextmanager
def sigint_deferred():
    """Hold a Ctrl-C (SIGINT) until the block has ended, then raise KeyboardInterrupt."""
    caught = []
    previous = signal.signal(signal.SIGINT, lambda *_: caught.append(True))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if caught:
        raise KeyboardInterrupt


def replace_results(pairs, backup):
    """Move each ``(new, old)`` of ``pairs`` into place: ``old`` (when there is one) goes to
    ``backup`` first, ``new`` (when there is one) takes its place. All or nothing: an
    OSError puts every moved file back before it is raised."""
    backup.mkdir()
    done = []  # (new, old, saved or None), to undo in reverse
    try:
        for i, (new, old) in enumerate(pairs):
            saved = None
            if old.exists():
                saved = backup / str(i)
                os.replace(old, saved)
            done.append((new, old, saved))
            if new.exists():
                os.replace(new, old)
    except OSError:
        for new, old, saved in reversed(done):
            if old.exists() and not new.exists():
                os.replace(old, new)
            if saved is not None:
                os.replace(saved, old)
        raise


def _kernel_env(results, output, tmp):
    env = dict(os.environ, D2LZH_RESULTS=str(results), D2LZH_OUTPUT_DIR=str(output),
               TMPDIR=str(tmp), PYTHONUNBUFFERED='1')
    # The kernel must be this interpreter's (the project's venv), whatever PATH says.
    env['PATH'] = str(Path(sys.executable).parent) + os.pathsep + env.get('PATH', '')
    return env


def relinked(nb, path, folder):
    """A copy of notebook ``nb``, read from ``path``, whose relative markdown links resolve
    from ``folder``, where the copy is kept: each link to a file (``../docs/...``, another
    notebook) becomes a relative path from ``folder`` to that file (:func:`lab.relink_markdown`,
    as for the lab's copies)."""
    nb = copy.deepcopy(nb)
    relink_markdown(nb, Path(path).resolve().parent,
                    lambda file: urllib.parse.quote(Path(os.path.relpath(file, folder)).as_posix()))
    return nb


def read_figures(path):
    """The figures :func:`d2lzh.results.record` wrote to ``path``: ``{key: {'value', 'unit',
    'subset', 'gpus', 'note', 'what', 'tags', 'spread', 'headline', 'kind'}}`` in the order first
    recorded (a later line wins; ``kind`` None in lines written before it existed); ``{}``
    without a file. ValueError names a line that is not JSON."""
    out = {}
    if not os.path.exists(path):
        return out
    with open(path, encoding='utf-8') as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                item = json.loads(line)
            except json.JSONDecodeError as err:
                raise ValueError(f'{path} 第 {number} 行不是记录（{err}）：请删掉这一行') from err
            out[item['key']] = {k: item.get(k) for k in (
                'value', 'subset', 'gpus', 'note', 'what', 'spread', 'kind')}
            out[item['key']].update(unit=item.get('unit', ''), tags=item.get('tags') or [],
                                    headline=bool(item.get('headline')))
    return out


def run_one(path, build, timeout):
    """Execute one notebook into ``build/run/<edition>/NAME.attempt/``; when every cell ran,
    its results replace the previous ones (see the module's docstring).

    Returns:
        dict: ``notebook`` (the path given), ``edition``, ``name``, ``title`` (its first
        heading), ``section`` (the book's, or None), ``status`` (``'ok'`` or ``'FAILED'``),
        ``seconds``, ``finished`` (UTC, ``YYYY-MM-DD HH:MM``), ``cpu_cores``, ``figures``
        (see :func:`read_figures`), ``error`` (one line, '' when ok); not saved:
        ``attempt`` (the folder of a failed attempt) and ``interrupted``.
    """
    edition, name = edition_of(path), path.stem
    folder = build / 'run' / edition
    attempt = folder / f'{name}.attempt'
    shutil.rmtree(attempt, ignore_errors=True)
    output = attempt / name
    output.mkdir(parents=True)
    figures = attempt / f'{name}.jsonl'
    work = nbformat.read(path, as_version=4)
    for cell in work.cells:
        if cell.cell_type == 'code':
            cell.outputs, cell.execution_count = [], None
    start = time.perf_counter()
    tmp = tempfile.mkdtemp(prefix=f'd2lzh-{name}-')  # the kernel's TMPDIR (short: sockets)
    try:
        with open(attempt / f'{name}.stderr.log', 'w') as log:
            error, interrupted = execute(work, path.resolve().parent, timeout,
                                         _kernel_env(figures, output, tmp), Progress(work), log)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    entry = project.find(path.resolve().as_posix())
    row = {'notebook': str(path), 'edition': edition, 'name': name,
           'title': notebook_title(work, name), 'section': entry and entry.section,
           'status': 'FAILED' if error else 'ok', 'seconds': round(time.perf_counter() - start, 1),
           'cpu_cores': os.cpu_count(),
           'finished': datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%d %H:%M'),
           'figures': read_figures(figures), 'error': f'{path} {error}' if error else ''}
    # its links lead from where it is kept: build/run/<edition>/, or the failed attempt's folder
    nbformat.write(relinked(work, path, attempt if error else folder), attempt / f'{name}.ipynb')
    (attempt / f'{name}.json').write_text(json.dumps(row, ensure_ascii=False, indent=1),
                                          encoding='utf-8')
    if not interrupted:  # the page of a failed attempt is read where it is
        try:
            render_html(work, attempt / f'{name}.html', path.resolve().parent,
                        ensure_mathjax(build / 'run'), page_dir=folder if not error else None,
                        cell_label=cell_label)
        except (ImportError, RuntimeError, ValueError) as err:  # the run counts more
            print(f'  警告：没有生成 {path} 的 HTML 网页：{err}', flush=True)
    if error:
        return dict(row, attempt=attempt, interrupted=interrupted)
    if not any(output.iterdir()):
        output.rmdir()
    (folder / 'results').mkdir(exist_ok=True)
    with sigint_deferred():
        replace_results([(attempt / f'{name}.ipynb', folder / f'{name}.ipynb'),
                         (attempt / f'{name}.html', folder / f'{name}.html'),
                         (attempt / f'{name}.jsonl', folder / 'results' / f'{name}.jsonl'),
                         (attempt / f'{name}.json', folder / 'results' / f'{name}.json'),
                         (output, folder / name)], attempt / 'previous')
        with open(build / 'run' / HISTORY, 'a', encoding='utf-8') as f:
            f.write(json.dumps(history_entry(row), ensure_ascii=False) + '\n')
        shutil.rmtree(attempt)
    return row


def _render_page(build):
    """``render_page(markdown, dest)`` for the summary page (scripts/run_summary.py)."""
    def render_page(text, dest):
        nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell(text)])
        render_html(nb, dest, dest.parent, ensure_mathjax(build / 'run'))
    return render_page


def run_all(notebooks, build, timeout):
    """Run ``notebooks`` one after the other, write the summary and print its lines.
    Returns the exit status: 0, 1 (a notebook or the summary failed) or 130 (interrupted)."""
    for edition in sorted({edition_of(p) for p in notebooks}):
        check_writable(build / 'run' / edition / 'results', build)
    rows, start = [], time.perf_counter()
    for number, path in enumerate(notebooks, 1):
        print(f'[{number}/{len(notebooks)}] 正在运行 {path} ……', flush=True)
        row = run_one(path, build, timeout)
        rows.append(row)
        if row['status'] == 'ok':
            print(f"  完成，用时 {row['seconds']:.0f} 秒", flush=True)
            continue
        print(f"  {'已中断' if row['interrupted'] else '失败'}（运行了 {row['seconds']:.0f} 秒）："
              f"{row['error']}\n  这次尝试的输出在 {rel(row['attempt'])}/；"
              '它上一次成功运行的结果没有改变', flush=True)
        if row['interrupted']:
            break
    summarised = summarise(rows, build)
    out = rel(build / 'run')
    print(f'\n本次运行：{len(rows)} 个笔记本，用时 {time.perf_counter() - start:.0f} 秒。保留的各次运行的汇总：'
          f'{out}/summary.md（图：summary.png，网页：summary.html）；执行过的笔记本和网页：'
          f'{out}/<edition>/')
    for r in rows:
        if r['status'] != 'ok':
            print(f"{'已中断' if r.get('interrupted') else '失败'}：{r['error']}"
                  f"（输出在 {rel(r['attempt'])}/）", file=sys.stderr)
    if rows and rows[-1].get('interrupted'):
        return 130
    return 1 if any(r['status'] != 'ok' for r in rows) or not summarised else 0


def summarise(rows, build):
    """Write the summary (when a notebook ran well or there is none yet) and print its lines.
    False when a record broke it: then it says so on stderr, in Chinese, with the record and
    the fix (:class:`run_summary.SummaryError`); the notebooks' results and the earlier
    summary files stay as they were."""
    try:
        if any(r['status'] == 'ok' for r in rows) or not (build / 'run' / 'summary.md').exists():
            results, history = write_summary(build, _render_page(build))
        else:  # nothing changed: the summary files stay as they are
            results, history = load_rows(build), load_history(build)
            check_rows(results, history, build)
    except SummaryError as err:
        out = rel(build / 'run')
        print(f'\n错误：没有更新汇总（{out}/summary.md、summary.png、summary.html 保持原样）：{err}。'
              f'各笔记本成功运行的结果已经保存在 {out}/<edition>/ 里，不受影响。', file=sys.stderr)
        return False
    print('\n' + '\n'.join(summary_lines(results, history)))
    return True


def render_stored(notebooks, build):
    """``--stored``: render the stored notebooks to ``build/stored/<edition>/NAME.html``."""
    for edition in sorted({edition_of(p) for p in notebooks}):
        check_writable(build / 'stored' / edition, build)
    mathjax = ensure_mathjax(build / 'stored')
    for path in notebooks:
        dest = build / 'stored' / edition_of(path) / f'{path.stem}.html'
        try:
            render_html(nbformat.read(path, as_version=4), dest, path.resolve().parent,
                        mathjax, cell_label=cell_label)
        except RuntimeError as err:  # nbconvert warned, or a link leads nowhere
            print(f'错误：{path}：{err}', file=sys.stderr)
            return 1
        print(f'{path} -> {rel(dest)}')
    return 0


def _terminate(signum, frame):
    raise KeyboardInterrupt


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
        print(f'错误：{err}', file=sys.stderr)
        return 2
    build = args.build.resolve()  # the kernels run in the notebooks' folders
    # SIGTERM as Ctrl-C: stop the kernel, keep the results
    previous = signal.signal(signal.SIGTERM, _terminate)
    try:
        if args.stored:
            return render_stored(notebooks, build)
        return run_all(notebooks, build, args.timeout)
    except BuildError as err:
        print(f'错误：{err}', file=sys.stderr)
    except OSError as err:
        if build_error(err, build) is None:
            raise
        print(f'错误：{build_error(err, build)}', file=sys.stderr)
    except KeyboardInterrupt:
        print('已中断：之前各次运行的结果没有改变', file=sys.stderr)
        return 130
    finally:
        signal.signal(signal.SIGTERM, previous)
    return 1

if __name__ == '__main__':
    sys.exit(main())
