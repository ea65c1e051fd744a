"""Simulate a cloud notebook runtime and open notebooks there as a new reader would.

Usage: ``python scripts/cloud_runtime.py [--python python3.11] [NOTEBOOK ... | --all]``
(``make cloud-test``; CI runs it). Default notebooks: one of each edition, MXNet 05 and
PyTorch 07 (which also quotes a stored bench JSON of the repository); ``--all``: every notebook
of both editions.

What it does, like Colab/Kaggle/SageMaker Studio Lab minus the GPU:

1. a fresh venv (``build/cloud/venv``) with only what those runtimes preinstall and
   matters here, pinned in ``requirements-cloud.txt``: numpy 2, a Jupyter kernel
   (ipykernel, executed through nbclient), matplotlib and a CPU build of torch. No d2lzh,
   no MXNet;
2. each notebook copied alone into an empty folder and executed there top to bottom in that
   venv's kernel, with ``D2LZH_SOURCE`` pointing at this checkout (the setup cell installs
   d2lzh from it; the first ``import mxnet`` installs MXNet from the package index) and a
   small ``D2LZH_MAX_EXAMPLES``;
3. checks: every cell ran without error, the kernel still has the numpy 2 it started with
   (a cell appended to the copy asserts it), and torch was not replaced.

Prints the seconds each step took. Exit status 1 on any failure, naming the notebook and
cell. Needs the package index (PyPI), as the cloud runtimes do; the data comes from
``/usr/share/datasets/fashion-mnist`` or is downloaded.

``--in-place`` skips step 1 and uses the environment of ``--python`` as it is: a real
runtime (the GPU machine of ``docs/gpu-runs.md``, or a Colab kernel's interpreter).
Nothing preinstalled there is changed; what the setup cell installs (d2lzh, mxnet,
requests) is removed again after each notebook, and d2lzh must not be installed before.
``--source`` sets ``D2LZH_SOURCE`` (default: this checkout; a built wheel where pip
cannot build, e.g. without an index), ``--keep DIR`` copies every executed notebook to
``DIR`` (to look at, or to store its outputs), ``--max-examples all`` trains on the full
data set.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from d2lzh import project, results  # noqa: E402

DEFAULT_NOTEBOOKS = ['notebooks/05_multiple-gpus.ipynb',
                     'notebooks/pytorch/07_modern-gpu-training.ipynb']

CHECK_CELL = '''# 由 scripts/cloud_runtime.py 追加：检查运行时原有的 numpy 和 torch 没有被换掉
import importlib.metadata, numpy, sys
print('numpy', numpy.__version__, '| d2lzh', importlib.metadata.version('d2lzh'),
      '| 已导入的框架：', [m for m in ('mxnet', 'torch') if m in sys.modules])
assert numpy.__version__ == {numpy!r}, numpy.__version__
assert importlib.metadata.version('torch') == {torch!r}
'''

EXECUTE = '''
import sys, nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError
path = sys.argv[1]
nb = nbformat.read(path, as_version=4)
client = NotebookClient(nb, timeout=int(sys.argv[2]), kernel_name='python3',
                        resources={'metadata': {'path': sys.argv[3]}})
try:
    client.execute()
    status = 0
except CellExecutionError as err:
    print(str(err)[-3000:], file=sys.stderr)
    status = 1
nbformat.write(nb, path)
sys.exit(status)
'''


def _text(output):
    text = output.get('text', '')
    return ''.join(text) if isinstance(text, list) else text


def run(cmd, **kwargs):
    start = time.perf_counter()
    out = subprocess.run(cmd, **kwargs)
    return out, time.perf_counter() - start


def _has(py, dist, cwd):
    """Whether the environment of interpreter ``py`` has the distribution ``dist``
    (asked from ``cwd``, an empty folder: a source tree's *.egg-info must not count)."""
    return subprocess.run([str(py), '-c', f'import importlib.metadata as m; m.version({dist!r})'],
                          capture_output=True, timeout=120, cwd=cwd).returncode == 0


def _uninstall(py, names):
    subprocess.run([str(py), '-m', 'pip', 'uninstall', '--quiet', '--yes', *names],
                   capture_output=True, timeout=300)


def main(argv=None):
    """Run :func:`_main`; remove the ``d2lzh.egg-info`` that pip's build of the checkout
    (``D2LZH_SOURCE``) writes into the source tree, unless it was there before: left
    behind, it makes ``importlib.metadata`` see d2lzh as installed from the repository root."""
    egg_info = ROOT / 'd2lzh.egg-info'
    had_egg_info = egg_info.exists()
    try:
        return _main(argv)
    finally:
        if not had_egg_info and egg_info.exists():
            shutil.rmtree(egg_info, ignore_errors=True)


def _main(argv=None):
    parser = argparse.ArgumentParser(
        description='模拟一个云端笔记本运行时，像新读者那样在里面打开笔记本。')
    parser.add_argument('notebooks', nargs='*', default=DEFAULT_NOTEBOOKS,
                        help='本项目的笔记本（默认：%(default)s）')
    parser.add_argument('--all', action='store_true', help='两个版本的全部笔记本')
    parser.add_argument('--python', default=sys.executable,
                        help='模拟运行时用的解释器（默认：运行本脚本的这个）')
    parser.add_argument('--build', default=str(ROOT / 'build' / 'cloud'),
                        help='模拟运行时和执行过的笔记本所在的文件夹（默认：%(default)s）')
    parser.add_argument('--max-examples', default='64',
                        help='D2LZH_MAX_EXAMPLES（默认：%(default)s；all：全部数据）')
    parser.add_argument('--timeout', type=int, default=600, help='每个单元格的秒数上限')
    parser.add_argument('--reuse-venv', action='store_true',
                        help='沿用上一次的运行时 venv，只删掉设置单元格装的 d2lzh、mxnet、'
                             'requests：更快，供开发时用')
    parser.add_argument('--in-place', action='store_true',
                        help='把 --python 的环境原样当作运行时（不建 venv；用于真实的运行时，'
                             '例如 GPU 机器）')
    parser.add_argument('--source', default=str(ROOT),
                        help='设置单元格用的 D2LZH_SOURCE（默认：本仓库的这个目录）')
    parser.add_argument('--keep', default=None,
                        help='把每个执行过的笔记本复制到这个文件夹')
    args = parser.parse_args(argv)
    notebooks = project.notebooks('all') if args.all else args.notebooks
    unknown = [rel for rel in notebooks if project.find(rel) is None]
    if unknown:
        parser.error(f'不是本项目的笔记本：{" ".join(unknown)}；'
                     f'可用的笔记本：{" ".join(project.notebooks("all"))}')
    notebooks = [project.find(rel).path for rel in notebooks]

    build = Path(args.build).resolve()
    venv = build / 'venv'
    py = venv / 'bin' / 'python'
    if args.in_place:
        py = Path(args.python)
        shutil.rmtree(build, ignore_errors=True)
        build.mkdir(parents=True)
        print(f'运行时：原样使用 {args.python}（--in-place）')
    elif args.reuse_venv and py.exists():
        subprocess.run([str(py), '-m', 'pip', 'uninstall', '--quiet', '--yes', 'd2lzh', 'mxnet',
                        'mxnet-cu112', 'requests'], capture_output=True, timeout=300)
        for path in build.iterdir():
            if path != venv:
                shutil.rmtree(path)
        print('模拟运行时：沿用上一次的（已删掉 d2lzh、mxnet、requests）')
    else:
        shutil.rmtree(build, ignore_errors=True)
        build.mkdir(parents=True)
        _, t = run([args.python, '-m', 'venv', str(venv)], check=True, timeout=300)
        out, t2 = run([str(py), '-m', 'pip', 'install', '--quiet', '--disable-pip-version-check',
                       '-r', str(ROOT / 'requirements-cloud.txt')], timeout=1200)
        if out.returncode != 0:
            print('错误：无法建立模拟运行时（pip 失败，见上面的输出）')
            return 1
        print(f'模拟运行时：建 venv 用了 {t:.0f} 秒，装预装的软件包用了 {t2:.0f} 秒')
    versions = json.loads(subprocess.run(
        [str(py), '-c', 'import json, numpy, importlib.metadata as m, importlib.util as u; '
         'print(json.dumps([numpy.__version__, m.version("torch"), u.find_spec("d2lzh") is None, '
         'u.find_spec("mxnet") is None]))'],
        capture_output=True, text=True, check=True, cwd=build).stdout)
    numpy_version, torch_version, no_d2lzh, no_mxnet = versions
    if not (numpy_version.startswith('2.') and no_d2lzh and no_mxnet):
        print(f'错误：这不是全新的 numpy 2 运行时：numpy {numpy_version}，d2lzh '
              f'{"没有装" if no_d2lzh else "已安装"}，mxnet '
              f'{"没有装" if no_mxnet else "已安装"}；请先卸载 d2lzh 和 mxnet')
        return 1
    print(f'  numpy {numpy_version}，torch {torch_version}，没有 d2lzh，没有 mxnet')

    # In place, PYTHONPATH may be how the runtime finds its own packages (the GPU machine's
    # kernel wheels); it must not lead to a d2lzh (checked above: none is importable).
    keep = ('D2LZH_DATA_DIR',) + (('PYTHONPATH',) if args.in_place else ())
    env = {k: v for k, v in os.environ.items() if k in keep or
           not k.startswith(('D2LZH_', 'PYTHON', 'VIRTUAL_ENV', 'JUPYTER', 'MPL'))}
    if not args.in_place:
        env['PATH'] = os.pathsep.join([str(venv / 'bin')] + [
            p for p in env.get('PATH', '').split(os.pathsep) if '.venv' not in p])
    source = args.source if '://' in args.source or not os.path.exists(args.source) \
        else str(Path(args.source).resolve())
    # The checkout stands in for the repository: the package (D2LZH_SOURCE) and the stored
    # bench results that a notebook downloads when it is opened alone (d2l.load_reference).
    env.update(D2LZH_SOURCE=source, D2LZH_MAX_EXAMPLES=args.max_examples,
               JUPYTER_PLATFORM_DIRS='1', MPLBACKEND='agg')
    env[results.REFERENCE_URL_ENV] = ROOT.as_uri() + '/'
    if args.max_examples == 'all':
        env.pop('D2LZH_MAX_EXAMPLES')
    # what a setup cell may install; in place, a package the runtime already had stays
    installed_by_setup = [name for name in ('d2lzh', 'mxnet', 'mxnet-cu112', 'requests')
                          if not (args.in_place and _has(py, name, build))]
    failed = []
    for rel in notebooks:
        # every notebook opens in a fresh runtime: nothing that an earlier one installed
        _uninstall(py, installed_by_setup)
        src = ROOT / rel
        folder = build / src.parent.name / src.stem
        folder.mkdir(parents=True)
        copy = folder / src.name
        nb = json.loads(src.read_text(encoding='utf-8'))
        nb['cells'].append({'cell_type': 'code', 'execution_count': None, 'id': 'cloud-check',
                            'metadata': {}, 'outputs': [], 'source': CHECK_CELL.format(
                                numpy=numpy_version, torch=torch_version)})
        copy.write_text(json.dumps(nb, indent=1, ensure_ascii=False), encoding='utf-8')
        tmp = folder / 'tmp'  # the kernel's temporary files (torch's compiled kernels too)
        tmp.mkdir()
        out, t = run([str(py), '-c', EXECUTE, str(copy), str(args.timeout), str(folder)],
                     env=dict(env, TMPDIR=str(tmp)), cwd=folder, capture_output=True, text=True,
                     timeout=args.timeout * 3)
        executed = json.loads(copy.read_text(encoding='utf-8'))
        setup_out = ''.join(_text(o) for o in executed['cells'][
            next(i for i, c in enumerate(executed['cells']) if c['cell_type'] == 'code')
        ].get('outputs', []))
        print(f'{rel}：{"通过" if out.returncode == 0 else "失败"}，用时 {t:.0f} 秒'
              f'（单独放在一个空文件夹里）')
        for line in setup_out.splitlines():
            print(f'  设置单元格：{line}')
        later = [_text(o) for c in executed['cells'][1:] for o in c.get('outputs', [])
                 if o.get('name') == 'stdout' and 'd2lzh：' in _text(o)]
        for text in later:
            for line in text.splitlines():
                if line.startswith('d2lzh：'):   # what d2lzh.setup.install prints
                    print(f'  第一次导入时：{line}')
        check = ''.join(_text(o) for o in executed['cells'][-1].get('outputs', []))
        print(f'  {check.strip()}')
        if out.returncode != 0:
            print(out.stderr[-3000:])
            failed.append(rel)
        if args.keep:
            kept = Path(args.keep) / src.parent.name
            kept.mkdir(parents=True, exist_ok=True)
            shutil.copy(copy, kept / src.name)
    _uninstall(py, installed_by_setup)
    if failed:
        print('在模拟的云端运行时中失败：', '、'.join(failed))
        return 1
    return 0


if __name__ == '__main__':
    sys.exit(main())
