"""The Makefile's edges, through ``make -n`` (nothing runs) or targets that build nothing:
its command-line checks (scripts/make_args.py), bare notebook names, ``make test`` with
NOTEBOOKS, the lab's working copies (scripts/lab.py), ``make clean``/``distclean`` and the
pyparsing pin.
"""
import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / 'scripts'))
import lab  # noqa: E402


# What a make that runs these tests (make test EDITION=all) hands down to the makes they start
_FROM_OUTER_MAKE = ('MAKEFLAGS', 'MFLAGS', 'MAKELEVEL', 'MAKEOVERRIDES', 'EDITION', 'NOTEBOOKS',
                    'TESTS', 'NUMPY', 'VENV', 'BUILD')


def make(*args, tmp_path, dry=True):
    """``make -C ROOT [-n] ARGS`` with its venv and build folder in ``tmp_path``, as typed in a
    shell (no variable of an outer make)."""
    env = {k: v for k, v in os.environ.items() if k not in _FROM_OUTER_MAKE}
    return subprocess.run(['make', '-C', str(ROOT), *(['-n'] if dry else []), *args,
                           'VENV=' + str(tmp_path / 'venv'), 'BUILD=' + str(tmp_path / 'build')],
                          capture_output=True, text=True, timeout=60, env=env)


def error_line(out):
    """The one line a refused command prints (make's directory lines aside)."""
    assert out.returncode != 0, out.stdout
    lines = [ln for ln in out.stdout.splitlines() + out.stderr.splitlines()
             if ln.strip() and 'Entering directory' not in ln and 'Leaving directory' not in ln]
    assert len(lines) == 1, lines
    return lines[0]


def command(out, script):
    """The words of the recipe line of ``make -n`` that runs ``script``."""
    assert out.returncode == 0, out.stderr
    line = next(ln for ln in out.stdout.replace('\\\n', ' ').splitlines() if script in ln)
    return line.split()


# ---------------------------------------------------------------- the command line
def make_args(*argv):
    """What scripts/make_args.py prints for ``argv``, as the Makefile calls it."""
    out = subprocess.run([sys.executable, str(ROOT / 'scripts' / 'make_args.py'), *argv],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.count('\n') == 1, out.stdout + out.stderr
    return out.stdout.strip()


KNOWN = ['--known', 'EDITION', 'NOTEBOOKS', 'TESTS', 'TEST_JOBS', 'D2LZH_MAX_EXAMPLES']


@pytest.mark.parametrize('args, expected', [
    (['--given', 'edition'], 'edition 不是这个 Makefile 的变量：你是不是想用 EDITION？'),
    (['--given', 'TEST_JOB'], 'TEST_JOB 不是这个 Makefile 的变量：你是不是想用 TEST_JOBS？'),
    (['--given', 'D2LZH_MAX_EXAMPLE'], '你是不是想用 D2LZH_MAX_EXAMPLES？'),
    (['--given', 'D2LZH_DATA_DR'], '你是不是想用 D2LZH_DATA_DIR？'),  # d2lzh's environment
    (['--edition', 'pytorch', '--notebooks', '02_hybridise'],
     '你是不是想用 notebooks/pytorch/02_hybridize.ipynb？'),
    (['--notebooks', 'notebooks/07_modern-gpu-training.ipynb'],   # only in the PyTorch edition
     '你是不是想用 notebooks/pytorch/07_modern-gpu-training.ipynb？'),
    (['--notebooks', 'notebooks/nope.ipynb'],
     'NOTEBOOKS：notebooks/nope.ipynb 不是本项目的笔记本；可用的笔记本：01_use-gpu 02_hybridize'),
    (['--edition', 'pytorch', '--notebooks', 'nope'], '可用的笔记本：pytorch/01_use-gpu'),
    (['--edition', 'mxnet', '--notebooks', 'notebooks/pytorch/01_use-gpu.ipynb'],
     '属于 PyTorch 版，但 EDITION=mxnet：请用 EDITION=pytorch 或 EDITION=all'),
    (['--edition', 'pytorch', '--notebooks', 'notebooks/01_use-gpu.ipynb'],
     '属于 MXNet 版，但 EDITION=pytorch：请用 EDITION=mxnet 或 EDITION=all'),
    (['--edition', 'mxnet', '--notebooks', '07_modern-gpu-training'], '属于 PyTorch 版'),
    (['--edition', 'mxnet pytorch'], 'EDITION=mxnet pytorch 无效：请用 EDITION=mxnet')])
def test_make_args_refuses_in_one_line(args, expected):
    line = make_args(*KNOWN, *args)
    assert line.startswith('error: ') and expected in line, line


@pytest.mark.parametrize('args, expected', [
    (['--given', 'CI', 'V', 'PYTHONPATH', 'JOBS', 'D2LZH_DATA_DIR', 'TESTS'],
     'mxnet notebooks/01_use-gpu.ipynb'),
    (['--notebooks', '02_hybridize'], 'mxnet notebooks/02_hybridize.ipynb'),
    (['--notebooks', '02_hybridize.ipynb'], 'mxnet notebooks/02_hybridize.ipynb'),
    (['--notebooks', 'notebooks/02_hybridize'], 'mxnet notebooks/02_hybridize.ipynb'),
    (['--notebooks', './notebooks/02_hybridize.ipynb'], 'mxnet notebooks/02_hybridize.ipynb'),
    (['--notebooks', str(ROOT / 'notebooks' / '05_multiple-gpus.ipynb')],
     'mxnet notebooks/05_multiple-gpus.ipynb'),
    (['--edition', 'pytorch', '--notebooks', '02_hybridize'],
     'pytorch notebooks/pytorch/02_hybridize.ipynb'),
    (['--edition', 'all', '--notebooks', '02_hybridize'],
     'all notebooks/02_hybridize.ipynb notebooks/pytorch/02_hybridize.ipynb'),
    (['--notebooks', 'pytorch/03_async-computation'],     # EDITION follows the notebooks
     'pytorch notebooks/pytorch/03_async-computation.ipynb'),
    (['--notebooks', '07_modern-gpu-training'], 'pytorch notebooks/pytorch/07_modern-gpu-training'),
    (['--notebooks', '01_use-gpu', 'pytorch/01_use-gpu.ipynb', '01_use-gpu'],
     'all notebooks/01_use-gpu.ipynb notebooks/pytorch/01_use-gpu.ipynb'),
    (['--notebooks'], 'mxnet'),                            # NOTEBOOKS= : none
    (['--edition', 'pytorch'], 'pytorch notebooks/pytorch/01_use-gpu.ipynb')])
def test_make_args_resolves_bare_names_to_the_projects_paths(args, expected):
    assert make_args(*KNOWN, *args).startswith(expected)


@pytest.mark.parametrize('args, expected', [
    (['NOTEBOOK=notebooks/02_hybridize.ipynb'],
     'NOTEBOOK 不是这个 Makefile 的变量：你是不是想用 NOTEBOOKS？'),
    (['EDITON=all'], 'EDITON 不是这个 Makefile 的变量：你是不是想用 EDITION？'),
    (['EDITION=nope'], 'EDITION=nope 无效：请用 EDITION=mxnet（notebooks/*.ipynb）、'
                       'EDITION=pytorch（notebooks/pytorch/*.ipynb）或 EDITION=all（两个版本）'),
    (['NOTEBOOKS=02_hybridise'], 'NOTEBOOKS：02_hybridise 不是本项目的笔记本：'
                                 '你是不是想用 notebooks/02_hybridize.ipynb？'),
    (['NUMPY=3'], 'NUMPY=3 无效：请用 NUMPY=1 或 NUMPY=2'),
    # forgot NOTEBOOKS=: a hint, not a run of every notebook
    (['notebooks/02_hybridize.ipynb'], 'notebooks/02_hybridize.ipynb 不是 make 的目标：'
                                       '请用 make run NOTEBOOKS=notebooks/02_hybridize.ipynb')])
def test_make_refuses_a_bad_command_line_in_one_line_before_any_work(tmp_path, args, expected):
    line = error_line(make('run', *args, tmp_path=tmp_path, dry=False))
    assert expected in line, line
    assert not (tmp_path / 'venv').exists() and not (tmp_path / 'build').exists()


def test_make_venv_without_a_python_says_what_to_install_in_chinese(tmp_path):
    """PYTHON empty, as where no Python 3.10+ is found: the line that says what to install, not
    an error about NUMPY (whose default once asked the missing Python)."""
    out = make('venv', 'PYTHON=', tmp_path=tmp_path, dry=False)
    assert out.returncode != 0
    assert '错误：找不到 Python 3.10 或更新的版本。请安装一个（例如 apt-get install python3.11 ' \
        'python3.11-venv），或者用 PYTHON=/path/to/python3.12 指定\n' in out.stdout, out.stdout
    assert not (tmp_path / 'venv').exists()


def test_make_takes_bare_names_and_unrelated_variables(tmp_path):
    out = make('run', 'NOTEBOOKS=02_hybridize', 'EDITION=pytorch', 'CI=true', 'V=1',
               tmp_path=tmp_path)
    words = command(out, 'run_notebooks.py')
    assert words[words.index('--build') + 2:] == ['notebooks/pytorch/02_hybridize.ipynb']


def test_make_test_with_notebooks_checks_only_them_unless_tests_is_given(tmp_path):
    words = command(make('test', 'NOTEBOOKS=02_hybridize', tmp_path=tmp_path), '--nbval')
    assert words[-1] == 'notebooks/02_hybridize.ipynb' and 'tests' not in words
    words = command(make('test', 'NOTEBOOKS=02_hybridize', 'TESTS=tests/test_data.py',
                         tmp_path=tmp_path), '--nbval')
    assert words[-2:] == ['tests/test_data.py', 'notebooks/02_hybridize.ipynb']
    words = command(make('test', 'EDITION=pytorch', tmp_path=tmp_path), '--nbval')
    assert words[words.index('tests') + 1] == 'notebooks/pytorch/01_use-gpu.ipynb'


@pytest.mark.parametrize('target, script', [('run', 'run_notebooks.py'), ('test', '--nbval'),
                                            ('lab', 'lab.py')])
def test_run_test_and_lab_find_and_verify_the_data_first(tmp_path, target, script):
    """README's first screen says so: each goes through make data (python -m d2lzh.data)."""
    out = make(target, tmp_path=tmp_path)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    data = next(i for i, ln in enumerate(lines) if '-m d2lzh.data' in ln)
    assert data < next(i for i, ln in enumerate(lines) if script in ln)


# ---------------------------------------------------------------- the lab's working copies
def tree(folder):
    """{relative path: sha256} of every file under ``folder``."""
    return {p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob('*')) if p.is_file()}


def link_lines(copy, stored):
    """The lines of the lab copy ``copy`` that differ from those of the stored notebook."""
    lines = copy.read_text(encoding='utf-8').splitlines()
    stored_lines = stored.read_text(encoding='utf-8').splitlines()
    assert len(lines) == len(stored_lines), copy
    return [a for a, b in zip(lines, stored_lines) if a != b]


def test_editing_a_lab_copy_leaves_the_stored_notebooks_byte_identical(tmp_path):
    stored, dest = tree(ROOT / 'notebooks'), tmp_path / 'lab'
    copied, _, _ = lab.copy_notebooks(dest)
    assert sorted(copied) == sorted('notebooks/' + p for p in stored)
    copies = [p for p in tree(dest / 'notebooks') if not p.startswith('linked/')]
    assert sorted(copies) == sorted(stored)            # pytorch/ included
    for path in copies:                                # the same but for links to linked/
        changed = link_lines(dest / 'notebooks' / path, ROOT / 'notebooks' / path)
        assert all('](linked/' in line or '](../linked/' in line for line in changed), changed
    copy = dest / 'notebooks' / 'pytorch' / '02_hybridize.ipynb'
    assert not copy.is_symlink() and copy.stat().st_ino != \
        (ROOT / 'notebooks' / 'pytorch' / '02_hybridize.ipynb').stat().st_ino
    fresh = copy.read_bytes()
    nb = json.loads(fresh)                             # a student edits and saves
    nb['cells'][0]['source'] = 'my own notes'
    copy.write_text(json.dumps(nb), encoding='utf-8')
    edited = copy.read_bytes()
    assert lab.copy_notebooks(dest) == ([], [], {})    # a later make lab keeps the copy
    assert copy.read_bytes() == edited
    assert tree(ROOT / 'notebooks') == stored

    copied, _, _ = lab.copy_notebooks(dest, ['notebooks/pytorch/02_hybridize.ipynb'], reset=True)
    assert copied == ['notebooks/pytorch/02_hybridize.ipynb']
    assert copy.read_bytes() == fresh
    assert (dest / 'previous' / 'notebooks' / 'pytorch' / '02_hybridize.1.ipynb').read_bytes() \
        == edited
    assert tree(ROOT / 'notebooks') == stored


def test_a_lab_copy_whose_stored_notebook_changed_is_named(tmp_path):
    root = tmp_path / 'repo'
    (root / 'notebooks').mkdir(parents=True)
    (root / 'notebooks' / '01_use-gpu.ipynb').write_text('{"v": 1}')
    path, dest = 'notebooks/01_use-gpu.ipynb', tmp_path / 'lab'
    assert lab.copy_notebooks(dest, [path], root=root) == ([path], [], {})
    (root / path).write_text('{"v": 2}')               # git pull brings a new version
    assert lab.copy_notebooks(dest, [path], root=root) == ([], [path], {})
    assert (dest / path).read_text() == '{"v": 1}'
    previous = dest / 'previous' / 'notebooks' / '01_use-gpu.1.ipynb'
    assert lab.copy_notebooks(dest, [path], reset=True, root=root) == ([path], [], {path: previous})
    assert lab.copy_notebooks(dest, [path], root=root) == ([], [], {})
    assert previous.read_text() == '{"v": 1}' and (dest / path).read_text() == '{"v": 2}'


MARKDOWN_LINK = re.compile(r'\]\(([^)\s#?]+)')


def markdown_texts(folder):
    """(file, markdown text) of every markdown cell of the notebooks and every .md file under
    ``folder``."""
    for path in sorted(folder.rglob('*')):
        if path.suffix == '.md':
            yield path, path.read_text(encoding='utf-8')
        elif path.suffix == '.ipynb':
            for cell in json.loads(path.read_text(encoding='utf-8'))['cells']:
                if cell['cell_type'] == 'markdown':
                    yield path, ''.join(cell['source'])


def test_every_relative_link_of_the_lab_copies_resolves_inside_the_lab_root(tmp_path):
    """JupyterLab starts in DEST/notebooks and serves nothing outside it: every relative link of
    a copy (``../docs/...`` in notebooks/) must name a file there."""
    lab.copy_notebooks(tmp_path / 'lab')
    root = (tmp_path / 'lab' / 'notebooks').resolve()
    resolved = set()
    for path, text in markdown_texts(root):
        for target in MARKDOWN_LINK.findall(text):
            if re.match(r'[A-Za-z][\w+.-]*:', target):
                continue                               # a URL
            file = (path.parent / target).resolve()
            assert file.is_relative_to(root) and file.is_file(), \
                f'{path.relative_to(root)}: {target} is not a file of the lab'
            resolved.add(file.relative_to(root).as_posix())
    assert 'linked/docs/reference-figures.md' in resolved
    assert (root / 'linked' / 'docs' / 'reference-figures.md').read_bytes() == \
        (ROOT / 'docs' / 'reference-figures.md').read_bytes()


def test_a_lab_kernel_finds_d2lzh_and_writes_under_the_copy(tmp_path):
    """The kernel of a lab copy runs in the copy's folder: the setup cell finds the installed
    d2lzh, and d2l.output_dir() is a folder there, not in notebooks/."""
    lab.copy_notebooks(tmp_path / 'lab', ['notebooks/pytorch/02_hybridize.ipynb'])
    folder = tmp_path / 'lab' / 'notebooks' / 'pytorch'
    env = {k: v for k, v in os.environ.items() if k not in ('D2LZH_OUTPUT_DIR', 'PYTHONPATH')}
    out = subprocess.run(
        [sys.executable, '-c', 'import importlib.util, d2lzh; '
         'assert importlib.util.find_spec("d2lzh") is not None; '
         'print(d2lzh.output_dir().resolve())'],
        cwd=folder, env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert Path(out.stdout.strip()) == folder / 'd2lzh-output'


def test_make_lab_reset_keeps_every_earlier_copy(tmp_path):
    """Each reset moves the student's copy to build/lab/previous/ under a new number and says
    where, in Chinese: two resets after two different edits leave both edits intact."""
    words = command(make('lab-reset', 'NOTEBOOKS=02_hybridize', tmp_path=tmp_path), 'lab.py')
    assert words[-2:] == ['--reset', 'notebooks/02_hybridize.ipynb']
    assert words[words.index('--dest') + 1] == str(tmp_path / 'build' / 'lab')
    out = make('lab-reset', 'NOTEBOOKS=02_hybridize', tmp_path=tmp_path, dry=False)
    assert out.returncode == 0, out.stderr
    assert '已从 notebooks/02_hybridize.ipynb 重新复制' in out.stdout and '保存在' not in out.stdout
    lab_dir = tmp_path / 'build' / 'lab'
    copy = lab_dir / 'notebooks' / '02_hybridize.ipynb'
    fresh, edits = copy.read_bytes(), []
    for n, notes in enumerate(['第一次的练习', '第二次的练习'], 1):
        nb = json.loads(fresh)
        nb['cells'][0]['source'] = notes
        copy.write_text(json.dumps(nb, ensure_ascii=False), encoding='utf-8')
        edits.append(copy.read_bytes())
        out = make('lab-reset', 'NOTEBOOKS=02_hybridize', tmp_path=tmp_path, dry=False)
        assert out.returncode == 0, out.stderr
        kept = lab_dir / 'previous' / 'notebooks' / f'02_hybridize.{n}.ipynb'
        assert f'你原来的副本保存在 {os.path.relpath(kept, ROOT)}' in out.stdout, out.stdout
        assert copy.read_bytes() == fresh
    assert [(lab_dir / 'previous' / 'notebooks' / f'02_hybridize.{n}.ipynb').read_bytes()
            for n in (1, 2)] == edits


def test_make_clean_and_distclean_keep_the_lab_folder(tmp_path):
    lab.copy_notebooks(tmp_path / 'build' / 'lab', ['notebooks/02_hybridize.ipynb'])
    (tmp_path / 'build' / 'lab' / 'previous').mkdir()
    (tmp_path / 'build' / 'lab' / 'previous' / '02_hybridize.1.ipynb').write_text('{}')
    lab_files = tree(tmp_path / 'build' / 'lab')
    venvs = ['GPU_BUILD_VENV=' + str(tmp_path / 'venv-cu112')]  # never the checkout's
    out = make('distclean', *venvs, tmp_path=tmp_path)
    assert out.returncode == 0, out.stderr
    removed = [w for ln in out.stdout.splitlines() if ln.startswith('rm ') for w in ln.split()[2:]]
    assert removed and all(w.startswith(str(tmp_path)) for w in removed), out.stdout
    for folder in ('build/run', 'build/stored', 'venv', 'venv-cu112'):
        (tmp_path / folder).mkdir()
    assert make('clean', tmp_path=tmp_path, dry=False).returncode == 0
    assert tree(tmp_path / 'build' / 'lab') == lab_files and (tmp_path / 'venv').is_dir()
    assert [p.name for p in (tmp_path / 'build').iterdir()] == ['lab']
    assert make('distclean', *venvs, tmp_path=tmp_path, dry=False).returncode == 0
    assert tree(tmp_path / 'build' / 'lab') == lab_files
    assert not (tmp_path / 'venv').exists() and not (tmp_path / 'venv-cu112').exists()


# ---------------------------------------------------------------- pins
def test_pyparsing_is_pinned_to_a_release_matplotlib_draws_with_silently():
    """pyparsing 3.3 deprecates the names matplotlib 3.9 calls: 28 warnings in make test."""
    pins = {name: re.search(r'^pyparsing==(\S+)$', (ROOT / name).read_text(), re.M)
            for name in ('requirements.txt', 'requirements-numpy2.txt', 'requirements-cloud.txt')}
    assert all(pins.values()), pins
    assert {m.group(1) for m in pins.values()} == {'3.2.5'}
    import pyparsing
    assert pyparsing.__version__ == '3.2.5', 'a venv older than the pin: run make venv'
    code = ('import warnings; warnings.simplefilter("always")\n'
            'import matplotlib; matplotlib.use("Agg"); import matplotlib.pyplot as plt\n'
            'plt.plot([1, 2]); plt.title(r"$a^2$"); plt.gcf().canvas.draw()')
    out = subprocess.run([sys.executable, '-W', 'always', '-c', code],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and 'deprecated' not in out.stderr, out.stderr
