"""Execute one notebook in a Jupyter kernel, showing which cell runs, for how long, and
the last line it printed.

Used by ``scripts/run_notebooks.py`` (``make run``). :func:`execute` runs the notebook in a
thread of its own, so that the main thread can keep the progress line current and take
Ctrl-C (SIGINT; ``run_notebooks`` turns SIGTERM into the same): it then stops the kernel and
every process it started, and says so.
"""
import os
import re
import shutil
import signal
import sys
import threading
import time


def first_line(cell):
    """The first line of a cell's source that is not blank (nbval's markers are cell tags)."""
    for line in cell.get('source', '').splitlines():
        if line.strip():
            return line.strip()
    return ''


def cell_label(cell):
    """How a cell is named in every message: ``单元格 [4] "first line"``.

    ``[4]`` is the execution count Jupyter shows beside the cell (``[ ]``
    when it has none), the text the first line of its source.
    """
    count = cell.get('execution_count')
    return f'单元格 [{count if count is not None else " "}] "{first_line(cell)}"'


def failing_cell(nb):
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


def last_output_line(cell):
    """The last non-blank line a cell has printed so far (stdout or stderr) as a terminal
    shows it: after its last carriage return, without escape sequences; '' when none."""
    for out in reversed(list(cell.get('outputs', []))):  # a copy: nbclient appends to it
        if out.get('output_type') == 'stream':
            text = re.sub(r'\x1b\[[0-?]*[ -/]*[@-~]|[\x00-\x08\x0b-\x1f\x7f]', '',
                          out.get('text', '').replace('\r', '\n'))
            lines = [line.strip() for line in text.splitlines() if line.strip()]
            if lines:
                return lines[-1]
    return ''


class Progress:
    """Which cell of how many runs, for how long, and the last line it printed.

    On a terminal one line that :meth:`tick` keeps current (tqdm), cut to the terminal's
    width: the cell's first line of source until it prints, then its last printed line.
    Elsewhere (CI, a pipe) a plain line when a cell starts and, every ``every`` seconds
    while it runs, one with its last printed line, cut to ``shutil.get_terminal_size()``
    (80 columns where there is no terminal).
    """

    def __init__(self, nb, stream=None, every=60):
        self.stream = stream or sys.stdout
        self.every = every
        # code cells that run: ordinal among them (1-based) by index among all cells
        runs = [i for i, c in enumerate(nb.cells) if c.cell_type == 'code' and c.source.strip()]
        self.ordinal = {index: n for n, index in enumerate(runs, 1)}
        self.total = len(runs)
        self.cell = self.started = None
        self.number = 0
        self.begin = self.said = time.perf_counter()
        self.bar = None
        if self.stream.isatty():
            from tqdm import tqdm
            self.bar = tqdm(total=self.total, file=self.stream, leave=False, ncols=self._columns(),
                            bar_format='  {bar:12} 用时 {elapsed} | {desc}')

    @staticmethod
    def _columns():
        return shutil.get_terminal_size().columns

    def cell_started(self, cell, cell_index, **_):
        """nbclient's ``on_cell_execute`` hook (called in the executing thread)."""
        self.number = self.ordinal.get(cell_index, 0)
        self.cell, self.started = cell, time.perf_counter()
        if self.bar is None:
            self._say(f'单元格 {self.number}/{self.total}："{first_line(cell)[:100]}"')
        else:
            self.bar.n = max(self.number - 1, 0)
        self.tick()

    def tick(self):
        """Bring the line up to date (the main thread calls it every second)."""
        if self.cell is None:
            return
        seconds = time.perf_counter() - self.started
        last = last_output_line(self.cell)
        source = f'> {last}' if last else f'"{first_line(self.cell)[:60]}"'
        if self.bar is not None:
            self.bar.ncols = self._columns()  # the terminal may have been resized
            self.bar.set_description_str(f'单元格 {self.number}/{self.total}，{seconds:.0f} 秒：'
                                         f'{source}')
        elif time.perf_counter() - self.said >= self.every:
            self._say(f'单元格 {self.number}/{self.total} 运行了 {seconds:.0f} 秒，尚未结束'
                      + (f'：{last}' if last else ''), cut=True)

    def where(self):
        """``单元格 3/25 "first line"（已运行 12 秒）``: the cell that runs, or '' before the
        first."""
        if self.cell is None:
            return ''
        return (f'单元格 {self.number}/{self.total} "{first_line(self.cell)[:60]}"'
                f'（已运行 {time.perf_counter() - self.started:.0f} 秒）')

    def _say(self, text, cut=False):
        """Print a line; ``cut``: to the terminal's width (a Chinese character takes two)."""
        from tqdm.utils import disp_trim
        self.said = time.perf_counter()
        text = f'  {text}'
        print(disp_trim(text, self._columns()) if cut else text, file=self.stream, flush=True)

    def close(self):
        """Remove the updating line (the caller prints the outcome)."""
        if self.bar is not None:
            self.bar.close()


def _stop_kernel(client, wait=10):
    """Stop the kernel's process group (it runs in a session of its own): SIGTERM, then
    SIGKILL after ``wait`` seconds. Returns nothing; a kernel already gone is fine."""
    provisioner = getattr(getattr(client, 'km', None), 'provisioner', None)
    pid = getattr(provisioner, 'pid', None)
    if pid is None:
        return
    for sig, seconds in ((signal.SIGTERM, wait), (signal.SIGKILL, wait)):
        try:
            os.killpg(pid, sig)
        except (ProcessLookupError, PermissionError):
            return
        deadline = time.perf_counter() + seconds
        while time.perf_counter() < deadline:
            try:
                os.killpg(pid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.2)


def execute(nb, cwd, timeout, env, progress, stderr=None):
    """Run every code cell of ``nb`` (in place) in a ``python3`` kernel started in ``cwd``
    with the environment ``env``; ``timeout`` seconds per cell; the kernel process's own
    stderr (what C++ libraries print there) goes to the open file ``stderr`` (None: ours).

    Returns:
        (error, interrupted): ``error`` is '' when every cell ran, else one line naming the
        cell as Jupyter shows it (``在单元格 [4] "first line" 出错：ValueError: ...``), what
        stopped the kernel, or where it was interrupted; it reads on from the notebook's
        path (``nbs/x.ipynb 在单元格 ...``). ``interrupted`` is True after Ctrl-C (SIGINT),
        which stops the kernel and every process in its group.
    """
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError, CellTimeoutError

    client = NotebookClient(nb, timeout=timeout, kernel_name='python3',
                            resources={'metadata': {'path': str(cwd)}},
                            on_cell_execute=progress.cell_started)
    failure = []

    def run():
        try:
            client.execute(env=env, stderr=stderr)
        except BaseException as err:  # reported by the main thread
            failure.append(err)

    thread = threading.Thread(target=run, name='notebook', daemon=True)
    thread.start()
    interrupted = False
    try:
        while thread.is_alive():
            thread.join(1.0)
            progress.tick()
    except KeyboardInterrupt:
        interrupted = True
        previous = {s: signal.signal(s, signal.SIG_IGN)  # stopping takes seconds
                    for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            _stop_kernel(client)
            thread.join(30)
        finally:
            for s, handler in previous.items():
                signal.signal(s, handler)
    finally:
        progress.close()
    if interrupted:
        where = progress.where()
        return (f'在{where}时被中断' if where else '在第一个单元格开始运行之前被中断') + \
            '（Ctrl-C、SIGINT 或 SIGTERM）', True
    if not failure:
        return '', False
    err = failure[0]
    if isinstance(err, CellTimeoutError):
        # the cell that was running, and its limit: its error output, if any, is only the
        # KeyboardInterrupt that stopping the kernel left, and nbclient's message ends in the
        # cell's source
        cell, what = progress.cell, f'超过了每个单元格 {timeout} 秒的时限'
    elif isinstance(err, CellExecutionError):
        cell, what = failing_cell(nb)
        if cell is None:
            text = str(err).strip()
            what = text.splitlines()[-1] if text else type(err).__name__
            cell = next((c for c in reversed(nb.cells) if c.cell_type == 'code'
                         and c.get('execution_count') is not None), None)
    else:  # the kernel died, did not start ...
        return f'没能运行完：{type(err).__name__}: {err}', False
    return (f'在{cell_label(cell)} ' if cell is not None else '在第一个单元格') + f'出错：{what}', False
