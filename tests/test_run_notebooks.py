"""The runner behind ``make run`` and ``make html`` (scripts/run_notebooks.py), its summary
(scripts/run_summary.py), on tiny notebooks written here (the Makefile's: test_make.py).

Nothing is ever lost (a failed, interrupted or half-replaced re-run leaves the earlier
results byte-identical), progress, the summary's tags come from the recorded figures, an
unwritable build folder is one line, every link of every rendered page and of every executed
copy resolves, and a run leaves nothing in the temporary folder.
"""
import html
import io
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import urllib.parse
from pathlib import Path

import nbformat
import pytest

from d2lzh import project

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / 'scripts'))
import execute  # noqa: E402
import run_notebooks  # noqa: E402
import run_summary  # noqa: E402

PNG_1X1 = ('iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAA'
           'AABJRU5ErkJggg==')


def write_nb(path, sources, title=None, text=''):
    cells = [nbformat.v4.new_code_cell(src) for src in sources]
    if title:
        cells.insert(0, nbformat.v4.new_markdown_cell(f'# {title}\n\nSome math: $a^2$. {text}'))
    nb = nbformat.v4.new_notebook(cells=cells)
    nb.metadata['kernelspec'] = {'name': 'python3', 'display_name': 'Python 3',
                                 'language': 'python'}
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, path)


def runner(args, cwd, **env):
    return subprocess.run([sys.executable, str(ROOT / 'scripts' / 'run_notebooks.py'), *args],
                          capture_output=True, text=True, timeout=300, cwd=cwd,
                          env=dict(os.environ, **env))


def results(build):
    """Every file of a build folder but MathJax and failed attempts: {path: bytes}."""
    return {p.relative_to(build).as_posix(): p.read_bytes() for p in sorted(build.rglob('*'))
            if p.is_file() and 'mathjax' not in p.parts
            and not any(part.endswith('.attempt') for part in p.parts)}


# ---------------------------------------------------------------- running
def test_runner_names_the_failing_cell_as_jupyter_does(tmp_path):
    bad = tmp_path / 'nbs' / 'bad.ipynb'
    write_nb(bad, ["import os\nx = os.write(2, b'native noise\\n')  # as C++ code prints",
                   '\nraise ValueError(\'boom\')', 'print("never")'])
    before = bad.read_bytes()
    out = runner(['--build', 'build', 'nbs/bad.ipynb'], tmp_path)  # relative, as make passes it
    assert out.returncode == 1, out.stdout + out.stderr
    # [2]: the execution count Jupyter shows; the first line that is not blank
    assert '失败：nbs/bad.ipynb 在单元格 [2] "raise ValueError(\'boom\')" 出错：ValueError: boom' \
        in out.stderr, out.stderr
    attempt = tmp_path / 'build' / 'run' / 'mxnet' / 'bad.attempt'
    assert '这次尝试的输出在 build/run/mxnet/bad.attempt/' in out.stdout
    executed = nbformat.read(attempt / 'bad.ipynb', as_version=4)
    assert executed.cells[1].execution_count == 2
    assert (attempt / 'bad.html').is_file()
    # the kernel's own stderr: kept with the failed attempt, not in the terminal
    assert (attempt / 'bad.stderr.log').read_text() == 'native noise\n'
    assert 'native noise' not in out.stdout + out.stderr
    assert not (tmp_path / 'build' / 'run' / 'mxnet' / 'bad.ipynb').exists(), \
        'a failed run is never a result'
    assert bad.read_bytes() == before, 'the source notebook is never modified'


RERUN = ['import os, time\nimport d2lzh as d2l',
         "value = float(os.environ.get('VALUE', '2'))\n"
         "d2l.record('speedup', value, 'x', what='快了', headline=True, spread=(1.5, 9.5))\n"
         "(d2l.output_dir() / 'trace.json').write_text(str(value))",
         "if os.environ.get('MODE') == 'fail':\n    raise RuntimeError('boom')",
         "if os.environ.get('MODE') == 'slow':\n"
         "    (d2l.output_dir() / 'pid').write_text(str(os.getpid()))\n"
         "    time.sleep(120)"]


def test_failed_and_interrupted_reruns_leave_the_results_byte_identical(tmp_path):
    write_nb(tmp_path / 'nbs' / '05_x.ipynb', RERUN, title='8.4 多GPU计算')
    build, args = tmp_path / 'build', ['--build', 'build', 'nbs/05_x.ipynb']
    folder, attempt = build / 'run' / 'mxnet', build / 'run' / 'mxnet' / '05_x.attempt'
    out = runner(args, tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    # progress, plain lines when not on a terminal: which notebook, which cell of how many
    assert '[1/1] 正在运行 nbs/05_x.ipynb ……\n' in out.stdout
    assert '  单元格 1/4："import os, time"\n' in out.stdout and '单元格 4/4' in out.stdout
    assert re.search(r'\n  完成，用时 \d+ 秒\n', out.stdout), out.stdout
    assert (folder / '05_x' / 'trace.json').read_text() == '2.0'
    assert not attempt.exists()
    good = results(build)
    assert {'run/mxnet/05_x.ipynb', 'run/mxnet/05_x.html', 'run/mxnet/results/05_x.json',
            'run/mxnet/results/05_x.jsonl', 'run/mxnet/05_x/trace.json', 'run/history.jsonl',
            'run/summary.md', 'run/summary.png', 'run/summary.html'} <= set(good)

    out = runner(args, tmp_path, MODE='fail', VALUE='9')
    assert out.returncode == 1
    assert '这次尝试的输出在 build/run/mxnet/05_x.attempt/' in out.stdout
    assert results(build) == good
    assert (attempt / '05_x' / 'trace.json').read_text() == '9.0'  # the attempt, kept aside

    proc = subprocess.Popen([sys.executable, str(ROOT / 'scripts' / 'run_notebooks.py'), *args],
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=dict(os.environ, MODE='slow', VALUE='7'),
                            # as from a terminal, also where this test runs with SIGINT ignored
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    pid_file, deadline = attempt / '05_x' / 'pid', time.monotonic() + 120
    while not pid_file.exists() and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.2)
    time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stdout + stderr
    assert '  已中断（运行了 ' in stdout and '这次尝试的输出在 build/run/mxnet/05_x.attempt/' \
        in stdout
    # where: the cell of how many, its first line, for how long it ran
    assert re.search(r'：nbs/05_x\.ipynb 在单元格 4/4 "if os\.environ\.get\(\'MODE\'\) == \'slow\':"'
                     r'（已运行 \d+ 秒）时被中断（Ctrl-C、SIGINT 或 SIGTERM）\n', stdout), stdout
    assert '已中断：nbs/05_x.ipynb 在单元格 4/4 ' in stderr and '失败' not in stderr, stderr
    assert results(build) == good
    kernel = int(pid_file.read_text())
    for _ in range(50):  # the kernel was stopped with the run
        try:
            os.kill(kernel, 0)
        except ProcessLookupError:
            break
        time.sleep(0.2)
    else:
        pytest.fail(f'the kernel {kernel} outlived the interrupted run')

    out = runner(args, tmp_path, VALUE='3')
    assert out.returncode == 0, out.stdout + out.stderr
    assert not attempt.exists() and (folder / '05_x' / 'trace.json').read_text() == '3.0'
    assert re.search(r'8\.4 多GPU计算（\d+ 秒）：3\.00×（1\.50×–9\.50×）；最近 2 次运行：2\.00×、3\.00×',
                     out.stdout), out.stdout
    assert '  8.4 多GPU计算：把小批量分给 2 个设备，训练能不能更快？快了 3.00×（范围 1.50×–9.50×）。' \
        in out.stdout, out.stdout


def test_a_failure_while_replacing_results_puts_every_file_back(tmp_path, monkeypatch, capsys):
    """The results are replaced all or nothing: an error in the middle (here the third
    move of the new files into place) moves back what was moved, and says one line."""
    write_nb(tmp_path / 'nbs' / '05_x.ipynb', RERUN, title='8.4')
    monkeypatch.chdir(tmp_path)
    args = ['--build', 'build', 'nbs/05_x.ipynb']
    assert run_notebooks.main(args) == 0
    good = results(tmp_path / 'build')
    real, calls = os.replace, []

    def flaky(src, dst):
        if '.attempt' in f'{src}{dst}':
            calls.append(dst)
            if len(calls) == 3:
                raise PermissionError(13, 'Permission denied', str(dst))
        return real(src, dst)

    monkeypatch.setattr(os, 'replace', flaky)
    monkeypatch.setenv('VALUE', '5')
    capsys.readouterr()
    assert run_notebooks.main(args) == 1
    err = capsys.readouterr().err
    assert err.count('\n') == 1 and err.startswith('错误：无法写入 build/run/mxnet/'), err
    assert 'Permission denied' in err and 'BUILD=DIR' in err
    assert results(tmp_path / 'build') == good


@pytest.mark.parametrize('stored', [False, True])
def test_an_unwritable_build_folder_is_one_line(tmp_path, stored):
    write_nb(tmp_path / 'nbs' / 'a.ipynb', ['1'])
    (tmp_path / 'build').write_text('not a folder')
    out = runner(['--build', 'build', 'nbs/a.ipynb'] + ['--stored'] * stored, tmp_path)
    assert out.returncode == 1
    assert out.stderr.count('\n') == 1, out.stderr
    assert out.stderr.startswith(f"错误：无法写入 build/{'stored' if stored else 'run'}/"
                                 'mxnet') and 'BUILD=DIR' in out.stderr, out.stderr


@pytest.mark.skipif(os.geteuid() == 0, reason='root writes into read-only folders')
def test_a_read_only_build_folder_is_one_line(tmp_path):
    write_nb(tmp_path / 'nbs' / 'a.ipynb', ['1'])
    (tmp_path / 'build').mkdir(mode=0o555)
    try:
        out = runner(['--build', 'build', 'nbs/a.ipynb'], tmp_path)
    finally:
        (tmp_path / 'build').chmod(0o755)
    assert out.returncode == 1 and out.stderr.count('\n') == 1, out.stderr
    assert 'Permission denied' in out.stderr and 'chmod -R u+w build' in out.stderr


def test_a_run_leaves_nothing_in_the_temporary_folder(tmp_path):
    """The kernel's TMPDIR is a folder of its own, removed after the notebook; the files a
    notebook writes (d2l.output_dir()) go into its folder in build/run/."""
    probe = f'd2lzh-probe-{os.getpid()}-'
    write_nb(tmp_path / 'nbs' / 'tmpcheck.ipynb', [
        'import tempfile\nimport d2lzh as d2l',
        f"tempfile.mkstemp(prefix='{probe}')\ntempfile.mkdtemp(prefix='{probe}')\n"
        'print(tempfile.gettempdir())',
        "(d2l.output_dir() / 'trace.json').write_text('{}')"])
    system_tmp = Path(tempfile.gettempdir())
    out = runner(['--build', 'build', 'nbs/tmpcheck.ipynb'], tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    left = [p.name for p in system_tmp.iterdir()
            if p.name.startswith((probe, 'd2lzh-tmpcheck-'))]
    assert left == []
    executed = nbformat.read(tmp_path / 'build' / 'run' / 'mxnet' / 'tmpcheck.ipynb',
                             as_version=4)
    kernel_tmp = Path(executed.cells[1].outputs[0].text.strip())
    assert kernel_tmp != system_tmp and not kernel_tmp.exists()
    assert (tmp_path / 'build' / 'run' / 'mxnet' / 'tmpcheck' / 'trace.json').is_file()
    assert sorted(p.name for p in (tmp_path / 'nbs').iterdir()) == ['tmpcheck.ipynb']


def test_progress_is_one_updating_line_on_a_terminal():
    class Terminal(io.StringIO):
        def isatty(self):
            return True

    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell('x = 1'),
                                         nbformat.v4.new_markdown_cell('text'),
                                         nbformat.v4.new_code_cell('train()\nmore()')])
    stream = Terminal()
    progress = execute.Progress(nb, stream)
    progress.cell_started(cell=nb.cells[2], cell_index=2)
    progress.tick()
    progress.close()
    text = stream.getvalue()
    assert ' 用时 00:00 | 单元格 2/2，0 秒："train()"' in text and '\r' in text and '\n' not in text.strip()


def stream(text, name='stdout'):
    return nbformat.v4.new_output('stream', name=name, text=text)


def test_the_last_output_line_is_the_one_a_terminal_shows():
    cell = nbformat.v4.new_code_cell('train()')
    assert execute.last_output_line(cell) == ''
    cell.outputs = [stream('loading\n'), stream('epoch 1, loss 0.91\nepoch 2, loss 0.52\n\n'),
                    nbformat.v4.new_output('display_data', data={'text/plain': 'Figure'})]
    assert execute.last_output_line(cell) == 'epoch 2, loss 0.52'
    cell.outputs.append(stream('\x1b[31m 10%|#  |\r 20%|## | 2/10\x1b[0m', 'stderr'))
    assert execute.last_output_line(cell) == '20%|## | 2/10'


def test_progress_shows_the_running_cells_last_line_cut_to_the_terminal(monkeypatch):
    class Terminal(io.StringIO):
        def isatty(self):
            return True

    monkeypatch.setenv('COLUMNS', '72')
    from tqdm.utils import disp_len
    cell = nbformat.v4.new_code_cell('d2l.train(net, train_iter, test_iter)')
    nb = nbformat.v4.new_notebook(cells=[cell])
    for out, every in ((Terminal(), 60), (io.StringIO(), 0)):
        progress = execute.Progress(nb, out, every=every)
        progress.cell_started(cell=cell, cell_index=0)
        cell.outputs = [stream('epoch 1, loss 0.9\nepoch 2, loss 0.5123, train acc 0.812, '
                               'test acc 0.800, 训练很长很长的一行 ' + 'x' * 80 + '\n')]
        progress.tick()
        progress.close()
        shown = [s for s in re.split(r'[\r\n]', out.getvalue()) if 'epoch' in s]
        assert shown and all(disp_len(s) <= 72 for s in shown), shown
        assert 'epoch 2, loss 0.51' in shown[-1] and 'epoch 1' not in shown[-1], shown
        cell.outputs = []
    assert shown[-1].startswith('  单元格 1/1 运行了 0 秒，尚未结束：epoch 2'), shown


def test_a_long_cells_output_reaches_the_progress_line_while_it_runs(tmp_path):
    """With a real kernel: the line printed before a cell's long wait is shown during it."""
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(
        "import time\nprint('epoch 1, loss 0.9', flush=True)\ntime.sleep(4)")])
    out = io.StringIO()
    env = dict(os.environ, TMPDIR=str(tmp_path), PYTHONUNBUFFERED='1')
    error, interrupted = execute.execute(nb, tmp_path, 60, env,
                                         execute.Progress(nb, out, every=1))
    assert (error, interrupted) == ('', False)
    assert '单元格 1/1 运行了 ' in out.getvalue()
    assert ' 秒，尚未结束：epoch 1, loss 0.9\n' in out.getvalue(), out.getvalue()


def test_a_cell_past_its_time_limit_is_named_with_the_limit(tmp_path):
    """A timeout leaves no error output: the line names the cell that was running and the
    limit, not the last line of nbclient's message (a line of dashes)."""
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell('x = 1'),
                                         nbformat.v4.new_code_cell('import time\ntime.sleep(60)')])
    env = dict(os.environ, TMPDIR=str(tmp_path))
    error, interrupted = execute.execute(nb, tmp_path, 2, env,
                                         execute.Progress(nb, io.StringIO()))
    assert (error, interrupted) == ('在单元格 [2] "import time" 出错：超过了每个单元格 2 秒的时限',
                                    False)


# ---------------------------------------------------------------- summary
def test_runner_keeps_both_editions_and_never_overwrites(tmp_path):
    """Same stem in both editions: make run EDITION=all keeps both; a later run of
    one edition and make html (--stored) leave the other results alone."""
    mx_nb = tmp_path / 'notebooks' / '01_same.ipynb'
    pt_nb = tmp_path / 'notebooks' / 'pytorch' / '01_same.ipynb'
    write_nb(mx_nb, ['import d2lzh as d2l', "d2l.record('speed', 2.5, 'x')"], title='MX title')
    write_nb(pt_nb, ['import d2lzh as d2l\nfrom d2lzh import data',
                     "data.CONTEXT['subset'] = 256",
                     "d2l.record('test_acc_2dev', 0.11, what='两个设备的测试准确率', "
                     "tags=['2 个设备 = 同一组 CPU 核心'])",
                     "d2l.record('epoch_time_1dev', 3.0, 's', note='mean of 2 epochs')"],
             title='PT title')
    out = runner(['--build', 'build', 'notebooks/01_same.ipynb',
                  'notebooks/pytorch/01_same.ipynb'], tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    run = tmp_path / 'build' / 'run'
    for edition in ('mxnet', 'pytorch'):
        for name in ('01_same.ipynb', '01_same.html', 'results/01_same.jsonl'):
            assert (run / edition / name).is_file(), (edition, name)
    summary = (run / 'summary.md').read_text()
    assert summary.index('## MXNet 版') < summary.index('## PyTorch 版')
    assert re.search(r'- \[MX title\]\(mxnet/01_same\.html\)（\d+ 秒）：2\.50×\n', summary)
    line = ('PT title：两个设备的测试准确率：0.11（接近随机猜测的 0.10）（只用了前 256 张训练图像）'
            '；条件：2 个设备 = 同一组 CPU 核心。')
    assert line in summary and line in out.stdout, out.stdout
    assert '| 01_same | `epoch_time_1dev` | 3.00 s | 只用了前 256 张训练图像（共 60000 张）；' \
        'mean of 2 epochs |' in summary
    # HTML: the notebook's first heading as title, one MathJax for the area, no CDN
    page = (run / 'pytorch' / '01_same.html').read_text()
    assert '<title>PT title（PyTorch）</title>' in page
    assert 'src="../mathjax/MathJax.js?config=' in page and 'cdnjs' not in page
    assert (run / 'mathjax' / 'config' / 'TeX-AMS-MML_HTMLorMML-full.js').is_file()
    mx_page = (run / 'mxnet' / '01_same.html').read_bytes()

    # a later run of one edition keeps the other's results and summary lines
    out = runner(['--build', 'build', 'notebooks/pytorch/01_same.ipynb'], tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    summary = (run / 'summary.md').read_text()
    assert '：2.50×' in summary and '两个设备的测试准确率' in summary
    assert (run / 'mxnet' / '01_same.html').read_bytes() == mx_page
    # make html renders the stored notebooks elsewhere; a stored chart gets an alt text
    nb = nbformat.read(mx_nb, as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell("chart = dict(title='Speed per device')", outputs=[
        nbformat.v4.new_output('display_data', data={
            'image/png': PNG_1X1, 'text/plain': '<Figure size 640x480 with 1 Axes>'})]))
    nbformat.write(nb, mx_nb)
    out = runner(['--stored', '--build', 'build', 'notebooks/01_same.ipynb',
                  'notebooks/pytorch/01_same.ipynb'], tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    stored_page = (tmp_path / 'build' / 'stored' / 'mxnet' / '01_same.html').read_text()
    assert '<title>MX title</title>' in stored_page
    assert re.findall(r'<img alt="([^"]*)"', stored_page) == ['图（MX title）：Speed per device']
    assert (tmp_path / 'build' / 'stored' / 'pytorch' / '01_same.html').is_file()
    assert (run / 'mxnet' / '01_same.html').read_bytes() == mx_page


def _figure(value, unit='', **kw):
    return dict({'value': value, 'unit': unit, 'subset': None, 'gpus': 0, 'note': None,
                 'what': None, 'tags': [], 'spread': None, 'headline': False}, **kw)


def test_summary_tags_come_from_the_recorded_figures(tmp_path):
    """PyTorch 06's figures: the one-process DDP run and the two-device DataParallel run
    are tagged by what the notebook recorded, never by their names."""
    figures = {
        'ips_ddp1': _figure(40.0, 'images/s', tags=['1 个进程']),
        'ips_dp2': _figure(35.0, 'images/s', tags=['2 个设备 = 同一组 CPU 核心']),
        'test_acc_2dev': _figure(0.71, subset=4096),
        'dp_speedup': _figure(0.9, 'x', what='DataParallel 在 2 个设备上', spread=(0.8, 1.1)),
        'ddp_speedup': _figure(1.8, 'x', what='DDP 的 2 个进程比 1 个快了', headline=True,
                               spread=(1.7, 1.9), tags=['2 个进程 = 同一组 CPU 核心'])}
    assert not hasattr(run_summary, 'figure_tags') and not hasattr(run_summary, 'TWO_DEVICES')
    assert run_summary.measured_on(figures['ips_ddp1']) == ['1 个进程']
    assert run_summary.measured_on(figures['ips_dp2']) == ['2 个设备 = 同一组 CPU 核心']
    assert run_summary.measured_on(figures['test_acc_2dev'], 'test_acc_2dev') == []
    assert run_summary.value_text('test_acc_2dev', figures['test_acc_2dev']) == \
        '0.71（只用了前 4096 张训练图像）'
    assert run_summary.headline(figures)[0] == 'ddp_speedup'
    row = {'notebook': 'notebooks/pytorch/06_x.ipynb', 'edition': 'pytorch', 'name': '06_x',
           'title': '8.5 多GPU计算的简洁实现', 'status': 'ok', 'seconds': 61.2, 'cpu_cores': 2,
           'finished': '2025-01-01 10:00', 'figures': figures, 'error': ''}
    results = tmp_path / 'build' / 'run' / 'pytorch' / 'results'
    results.mkdir(parents=True)
    (results / '06_x.json').write_text(json.dumps(row, ensure_ascii=False))
    history = [{'edition': 'pytorch', 'name': '06_x', 'figures': {'ddp_speedup': v}}
               for v in (1.2, 1.75, 1.8)]
    (tmp_path / 'build' / 'run' / 'history.jsonl').write_text(
        ''.join(json.dumps(h) + '\n' for h in history))
    rows, hist = run_summary.write_summary(tmp_path / 'build',
                                           run_notebooks._render_page(tmp_path / 'build'))
    lines = run_summary.summary_lines(rows, hist)
    assert lines[0] == 'PyTorch 版（notebooks/pytorch/）：2 个 CPU 核心，没有 PyTorch 能用的 GPU'
    assert lines[lines.index('每节的结论：') + 1] == (
        '  8.5 多GPU计算的简洁实现：用框架自带的数据并行在 2 个设备上训练，能不能更快？'
        'DDP 的 2 个进程比 1 个：快了 1.80×（范围 1.70×–1.90×）；'
        '条件：2 个进程 = 同一组 CPU 核心。')
    assert lines[-1] == ('  8.5 多GPU计算的简洁实现（61 秒）：1.80×（1.70×–1.90×）；'
                         '最近 3 次运行：1.20×、1.75×、1.80×')
    text = (tmp_path / 'build' / 'run' / 'summary.md').read_text()
    assert '| 06_x | `ips_dp2` | 35.0 张/秒 | 2 个设备 = 同一组 CPU 核心 |' in text
    assert '| 06_x | `ips_ddp1` | 40.0 张/秒 | 1 个进程 |' in text
    assert '| 0.90×（0.80×–1.10×，测不出明显差别） |' in text
    assert '没有 PyTorch 能用的 GPU' in text and '不能说明两块 GPU 的情形' in text
    # the chart: each notebook's headline speed-up, in summary.png and on the summary page
    assert [i['key'] for i in run_summary.speedups(rows)] == ['PyTorch 06_x: ddp_speedup']
    assert (tmp_path / 'build' / 'run' / 'summary.png').read_bytes()[:4] == b'\x89PNG'
    page = (tmp_path / 'build' / 'run' / 'summary.html').read_text()
    assert re.search(r'<img[^>]*src="summary\.png"', page) and '1.20×、1.75×、1.80×' in page


# A notebook's run without its kernel (scripts/execute.py): it records what a real run of that
# notebook recorded, through d2lzh.results.record; everything else of make run is real but the
# HTML pages (MathJax and nbconvert: covered above).
RECORDED = json.loads((ROOT / 'tests' / 'data' / 'make-run-mxnet-2cores.json').read_text('utf-8'))
# PyTorch 02 as it recorded on a 2-core CPU before issue 47: its range rounded, the first
# repeat's 25 s compile making its low bound 0.0, which the chart's log axis could not take.
PYTORCH_02 = [('compile_speedup', 0.41, 'x', dict(spread=(0.0, 0.58), headline=True, kind='speedup',
                                                  what='书中的 MLP 用 torch.compile 后的加速比')),
              ('compile_first_call_s', 25.1, 's', {}),
              ('fusion_speedup', 3.1, 'x', dict(spread=(2.9, 3.3), kind='speedup'))]
PT_02, MX_04 = ROOT / 'notebooks/pytorch/02_hybridize.ipynb', ROOT / 'notebooks/04_auto-parallelism.ipynb'


def _recorded_run(monkeypatch):
    """Make run_notebooks.run_one's kernel record the figures a real run of each notebook did."""
    from d2lzh import results

    def execute(work, cwd, timeout, env, progress, log):
        monkeypatch.setenv('D2LZH_RESULTS', env['D2LZH_RESULTS'])  # build/run/.../NAME.jsonl
        name = Path(env['D2LZH_RESULTS']).stem
        if Path(cwd).name == 'pytorch':
            assert name == '02_hybridize'
            for key, value, unit, kw in PYTORCH_02:
                results.record(key, value, unit, subset=None, **kw)
        else:
            row = next(r for r in RECORDED['rows'] if r['name'] == name)
            for key, fig in row['figures'].items():
                results.record(key, fig['value'], fig['unit'], fig['note'], what=fig['what'],
                               tags=fig['tags'], spread=fig['spread'], headline=fig['headline'],
                               kind=fig.get('kind'), subset=fig['subset'])
        return '', False

    def render_html(nb, dest, *args, **kwargs):
        Path(dest).write_text('<html></html>', encoding='utf-8')
    monkeypatch.setattr(run_notebooks, 'execute', execute)
    monkeypatch.setattr(run_notebooks, 'render_html', render_html)
    monkeypatch.setattr(run_notebooks, 'ensure_mathjax', lambda area: Path(area) / 'mathjax')


def test_pytorch_02_then_make_run_both_succeed(tmp_path, monkeypatch, capsys):
    """Issue 47: `make run EDITION=pytorch NOTEBOOKS=02_hybridize` then `make run` (the MXNet
    edition) both exit 0 on a CPU, with PyTorch 02's zero-bounded range from before the fix."""
    _recorded_run(monkeypatch)
    build = tmp_path / 'build'
    assert run_notebooks.main(['--build', str(build), str(PT_02)]) == 0
    chart = (build / 'run' / 'summary.png').read_bytes()
    assert chart[:4] == b'\x89PNG'
    assert run_notebooks.main(['--build', str(build)]) == 0
    out = capsys.readouterr()
    assert (build / 'run' / 'summary.png').read_bytes() not in (chart, b'')  # drawn again
    text = (build / 'run' / 'summary.md').read_text('utf-8')
    assert '## MXNet 版：每个笔记本' in text and '## PyTorch 版：每个笔记本' in text
    assert '反而慢了，只有原来速度的 0.41×（范围 0.00×–0.58×）' in text
    assert '错误' not in out.err and not list((build / 'run').glob('.*.part'))
    assert len((build / 'run' / 'history.jsonl').read_text().splitlines()) == 8


def test_a_record_that_breaks_the_summary_fails_the_run_and_keeps_its_results(tmp_path,
                                                                               monkeypatch, capsys):
    """A failed summary says, in Chinese, which record broke it and what to do; the exit status
    says failure; the notebook's own results are kept, and so are the earlier summary files."""
    _recorded_run(monkeypatch)
    build = tmp_path / 'build'
    assert run_notebooks.main(['--build', str(build), str(PT_02)]) == 0
    before = {p: (build / 'run' / p).read_bytes() for p in ('summary.md', 'summary.png')}
    broken = build / 'run' / 'pytorch' / 'results' / '02_hybridize.json'
    broken.write_text('{"edition": "pytorch", "name": "02_hy', encoding='utf-8')  # cut off
    capsys.readouterr()
    monkeypatch.chdir(tmp_path)
    assert run_notebooks.main(['--build', 'build', str(MX_04)]) == 1
    err = capsys.readouterr().err
    assert '错误：没有更新汇总（build/run/summary.md、summary.png、summary.html 保持原样）：' \
        'build/run/pytorch/results/02_hybridize.json 让汇总出错（JSONDecodeError: ' in err, err
    assert '请重新运行这个笔记本（make run EDITION=pytorch NOTEBOOKS=02_hybridize BUILD=build）' in err
    assert '或者用 make clean BUILD=build 删掉之前的所有结果' in err
    assert (build / 'run' / 'mxnet' / 'results' / '04_auto-parallelism.json').is_file()
    assert {p: (build / 'run' / p).read_bytes() for p in before} == before
    broken.unlink()  # the fix the message gives (here: the record removed, as make clean would)
    assert run_notebooks.main(['--build', 'build', str(MX_04)]) == 0


# ---------------------------------------------------------------- links
def broken_links(page):
    """Every link of an HTML page that does not resolve: a relative one to a file that is
    not there, an anchor without its id, a repository URL to a file not in the checkout.
    Other absolute URLs are not checked (no network)."""
    text = page.read_text(encoding='utf-8')
    ids = {urllib.parse.unquote(html.unescape(i)) for i in re.findall(r'\sid="([^"]*)"', text)}
    owner, name, branch = project.repository()
    repo = re.compile(rf'https://github\.com/{owner}/{name}/(?:blob|tree)/{branch}/([^?#]*)')
    bad = []
    for url in map(html.unescape, re.findall(r'\s(?:href|src)="([^"]*)"', text)):
        if url.startswith('data:'):
            continue
        if url.startswith('#'):
            ok = urllib.parse.unquote(url[1:]) in ids
        elif repo.match(url):
            ok = (ROOT / urllib.parse.unquote(repo.match(url).group(1))).exists()
        elif re.match(r'^([A-Za-z][A-Za-z0-9+.-]*:|//)', url):
            continue
        else:
            path = urllib.parse.unquote(re.split(r'[?#]', url)[0])
            ok = not url.startswith('/') and (page.parent / path).exists()
        if not ok:
            bad.append(url)
    return bad


def test_every_link_of_every_rendered_page_resolves(tmp_path):
    """The stored notebooks of both editions as make html renders them, a run's pages, a
    failed attempt's page and the summary page: every link resolves."""
    (tmp_path / 'docs').mkdir()
    (tmp_path / 'docs' / 'figures.md').write_text('# figures')
    links = '[来源](../docs/figures.md)，[上一节](01_other.ipynb#练习)，[本节](#Links)'
    write_nb(tmp_path / 'notebooks' / '01_other.ipynb', ['1'], title='Other')
    write_nb(tmp_path / 'notebooks' / '02_links.ipynb', ['x = 1'], title='Links', text=links)
    write_nb(tmp_path / 'notebooks' / 'pytorch' / '03_fails.ipynb', ['1 / 0'], title='Fails',
             text=links.replace('../docs', '../../docs').replace('01_', '../01_')
             .replace('#Links', '#Fails'))
    out = runner(['--build', 'build', 'notebooks/02_links.ipynb',
                  'notebooks/pytorch/03_fails.ipynb'], tmp_path)
    assert out.returncode == 1 and '警告' not in out.stdout, out.stdout + out.stderr
    stored = [str(ROOT / p) for p in project.notebooks('all')]
    out = runner(['--stored', '--build', 'build', *stored], tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    pages = [p for p in (tmp_path / 'build').rglob('*.html') if 'mathjax' not in p.parts]
    assert len(pages) == len(stored) + 3  # + 02_links, 03_fails' attempt, the summary
    assert {p.relative_to(tmp_path / 'build').as_posix(): broken_links(p) for p in pages
            if broken_links(p)} == {}
    page = (tmp_path / 'build' / 'run' / 'mxnet' / '02_links.html').read_text()
    assert 'href="../../../docs/figures.md"' in page


def linked_files(nb, folder):
    """The file each relative markdown link of notebook ``nb`` names from ``folder``, in order
    (None: no such file); URLs and anchors aside."""
    files = []
    for cell in nb.cells:
        if cell.cell_type == 'markdown':
            for target in re.findall(r'\]\(([^)\s#?]+)', cell.source):
                if not re.match(r'[A-Za-z][\w+.-]*:|/', target):
                    file = (Path(folder) / urllib.parse.unquote(target)).resolve()
                    files.append(file if file.is_file() else None)
    return files


def test_every_relative_link_of_an_executed_copy_names_the_file_it_names_in_notebooks(tmp_path):
    """An executed copy in build/run/<edition>/ (and a failed attempt's, one folder deeper)
    keeps its markdown links working: each leads to the file the stored notebook's link
    names (docs, another notebook), as a lab copy's does (lab.relink_markdown)."""
    (tmp_path / 'docs').mkdir()
    (tmp_path / 'docs' / 'figures.md').write_text('# figures')
    write_nb(tmp_path / 'notebooks' / '01_other.ipynb', ['1'], title='Other')
    write_nb(tmp_path / 'notebooks' / '02_links.ipynb', ['x = 1'], title='Links',
             text='[来源](../docs/figures.md)，[上一节](01_other.ipynb#练习)，'
                  '[PyTorch 版](pytorch/03_fails.ipynb)，[本节](#Links)，[书](https://zh.d2l.ai/)')
    write_nb(tmp_path / 'notebooks' / 'pytorch' / '03_fails.ipynb', ['1 / 0'], title='Fails',
             text='[来源](../../docs/figures.md)，[MXNet 版](../02_links.ipynb#Links)')
    out = runner(['--build', 'build', 'notebooks/02_links.ipynb',
                  'notebooks/pytorch/03_fails.ipynb'], tmp_path)
    assert out.returncode == 1, out.stdout + out.stderr
    run = tmp_path / 'build' / 'run'
    for copy, name in ((run / 'mxnet' / '02_links.ipynb', '02_links.ipynb'),
                       (run / 'pytorch' / '03_fails.attempt' / '03_fails.ipynb',
                        'pytorch/03_fails.ipynb')):
        stored = tmp_path / 'notebooks' / name
        files = linked_files(nbformat.read(copy, as_version=4), copy.parent)
        assert None not in files, (copy, files)
        assert files == linked_files(nbformat.read(stored, as_version=4), stored.parent)
    assert len(linked_files(nbformat.read(run / 'mxnet' / '02_links.ipynb', as_version=4),
                            run / 'mxnet')) == 3
    assert '](https://zh.d2l.ai/)' in (run / 'mxnet' / '02_links.ipynb').read_text()

    # the project's notebooks, as make run keeps them: every link they have leads somewhere
    seen = set()
    for path in project.notebooks('all'):
        stored = ROOT / path
        folder = run / run_notebooks.edition_of(stored)
        folder.mkdir(parents=True, exist_ok=True)
        nb = nbformat.read(stored, as_version=4)
        files = linked_files(run_notebooks.relinked(nb, stored, folder), folder)
        assert None not in files and files == linked_files(nb, stored.parent), (path, files)
        seen.update(f.relative_to(ROOT).as_posix() for f in files)
    assert {'docs/reference-figures.md', 'notebooks/pytorch/01_use-gpu.ipynb',
            'notebooks/07_distributed-training.ipynb'} <= seen, seen


def test_a_link_that_leads_nowhere_stops_make_html_with_one_line(tmp_path):
    write_nb(tmp_path / 'nbs' / 'a.ipynb', ['1'], title='A', text='[x](../docs/missing.md)')
    out = runner(['--stored', '--build', 'build', 'nbs/a.ipynb'], tmp_path)
    assert out.returncode == 1 and out.stderr.count('\n') == 1, out.stderr
    assert 'a 的链接指向不存在的文件或文件夹：../docs/missing.md（相对于 ' in out.stderr


# ---------------------------------------------------------------- command line
@pytest.mark.parametrize('args, message', [
    (['nbs/nope.ipynb'], '错误：不是存在的 .ipynb 笔记本：nbs/nope.ipynb；可用的笔记本：notebooks/'),
    (['a/x.ipynb', 'b/x.ipynb'], '都会写到 build/run/mxnet/x.*')])
def test_runner_refuses_bad_notebooks_in_one_line(tmp_path, args, message):
    for name in ('a/x.ipynb', 'b/x.ipynb'):
        write_nb(tmp_path / name, ['1'])
    out = runner(['--build', 'build', *args], tmp_path)
    assert out.returncode == 2
    assert out.stderr.count('\n') == 1 and message in out.stderr, out.stderr
    assert not (tmp_path / 'build').exists()
