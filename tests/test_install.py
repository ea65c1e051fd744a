"""d2lzh.setup.install and d2lzh.setup.gpus: the GPU query (a fake nvidia-smi on PATH), the
build choice, pip failures, the command line, installing at import (d2lzh.setup.enable), and
the setup cell's own bootstrap in a fresh venv."""
import importlib.util
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import d2lzh.setup
from d2lzh import project
from d2lzh.setup import cuda11, install
from d2lzh.setup.gpus import GPU, GPUQueryError, query_gpus

ROOT = Path(__file__).resolve().parent.parent


def fake_nvidia_smi(tmp_path, monkeypatch, stdout='', stderr='', rc=0, names=None):
    """Put an executable `nvidia-smi` on PATH that answers like the real one."""
    bindir = tmp_path / 'bin'
    bindir.mkdir(exist_ok=True)
    script = bindir / 'nvidia-smi'
    names_branch = ''
    if names is not None:
        names_branch = (f'if [ "$1" = "--query-gpu=name" ]; then printf %b {names!r}; exit 0; fi\n')
    script.write_text('#!/bin/sh\n' + names_branch +
                      f'printf %b {stdout!r}\nprintf %b {stderr!r} >&2\nexit {rc}\n')
    script.chmod(0o755)
    monkeypatch.setenv('PATH', str(bindir))
    monkeypatch.delenv('D2LZH_MXNET_PACKAGE', raising=False)


def test_no_nvidia_smi_means_cpu_build(tmp_path, monkeypatch):
    monkeypatch.setenv('PATH', str(tmp_path))
    monkeypatch.delenv('D2LZH_MXNET_PACKAGE', raising=False)
    assert query_gpus() == []
    plan = install.choose_mxnet(query_gpus())
    assert plan.package == 'mxnet==1.9.1' and not plan.cuda11 and plan.warning is None


@pytest.mark.parametrize('answer, name, cc', [
    ('Tesla T4, 7.5\n', 'Tesla T4', (7, 5)),                               # Colab, Studio Lab
    ('Tesla T4, 7.5\nTesla T4, 7.5\n', 'Tesla T4', (7, 5)),                # Kaggle 2x T4
    ('Tesla P100-PCIE-16GB, 6.0\n', 'Tesla P100-PCIE-16GB', (6, 0)),        # Kaggle P100
    ('NVIDIA A100-SXM4-40GB, 8.0\n', 'NVIDIA A100-SXM4-40GB', (8, 0)),
    ('NVIDIA L4, 8.9\n', 'NVIDIA L4', (8, 9)),
])
def test_maxwell_to_ada_gets_mxnet_cu112_and_cuda11(tmp_path, monkeypatch, answer, name, cc):
    fake_nvidia_smi(tmp_path, monkeypatch, stdout=answer)
    gpus = query_gpus()
    assert gpus[0] == GPU(name, cc) and len(gpus) == answer.count('\n')
    plan = install.choose_mxnet(gpus)
    assert plan.package == 'mxnet-cu112==1.9.1' and plan.cuda11 and plan.warning is None
    assert name in plan.reason


@pytest.mark.parametrize('answer', ['NVIDIA H100 80GB HBM3, 9.0\n', 'NVIDIA H200, 9.0\n',
                                    'NVIDIA B200, 10.0\n'])
def test_hopper_and_newer_get_cpu_build_and_the_pytorch_notebook(tmp_path, monkeypatch, answer):
    fake_nvidia_smi(tmp_path, monkeypatch, stdout=answer)
    name = answer.split(',')[0]
    plan = install.choose_mxnet(query_gpus(), notebook='05_multiple-gpus.ipynb')
    assert plan.package == 'mxnet==1.9.1' and not plan.cuda11
    assert name in plan.warning and 'Hopper' in plan.warning
    owner, repo, branch = project.repository()
    assert (f'https://colab.research.google.com/github/{owner}/{repo}/blob/{branch}/'
            'notebooks/pytorch/05_multiple-gpus.ipynb') in plan.warning
    # section unknown (Colab does not tell the kernel the notebook's name): the folder
    plan = install.choose_mxnet(query_gpus())
    assert plan.warning.endswith(f'/{owner}/{repo}/tree/{branch}/notebooks/pytorch')


def test_every_mxnet_notebook_links_its_pytorch_twin(monkeypatch):
    monkeypatch.delenv('D2LZH_MXNET_PACKAGE', raising=False)
    for path in project.notebooks('mxnet'):
        twin = project.find(path).twin
        assert (ROOT / twin).is_file() and twin.startswith('notebooks/pytorch/')
        plan = install.choose_mxnet([GPU('NVIDIA H100', (9, 0))], notebook=Path(path).name)
        assert plan.warning.endswith(project.url(twin, 'colab'))


def test_kepler_is_too_old(tmp_path, monkeypatch):
    fake_nvidia_smi(tmp_path, monkeypatch, stdout='Tesla K80, 3.7\n')
    plan = install.choose_mxnet(query_gpus())
    assert plan.package == 'mxnet==1.9.1' and 'Tesla K80' in plan.warning and '3.7' in plan.warning


def test_unknown_compute_capability(tmp_path, monkeypatch):
    fake_nvidia_smi(tmp_path, monkeypatch, stdout='Some Future GPU, [N/A]\n')
    gpus = query_gpus()
    assert gpus == [GPU('Some Future GPU', None)]
    plan = install.choose_mxnet(gpus)
    assert plan.package == 'mxnet==1.9.1'
    assert 'Some Future GPU' in plan.warning and 'D2LZH_MXNET_PACKAGE=mxnet-cu112' in plan.warning


def test_driver_too_old_for_compute_cap_field(tmp_path, monkeypatch):
    # drivers before 510 answer this (exit code 2) and know only the names
    fake_nvidia_smi(tmp_path, monkeypatch, rc=2,
                    stdout='Field "compute_cap" is not a valid field to query.\n\n',
                    names='Tesla K40m\n')
    gpus = query_gpus()
    assert gpus == [GPU('Tesla K40m', None)]
    assert 'Tesla K40m' in install.choose_mxnet(gpus).warning


def test_gpu_runtime_without_driver(tmp_path, monkeypatch):
    msg = ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
           "Make sure that the latest NVIDIA driver is installed and running.\n")
    fake_nvidia_smi(tmp_path, monkeypatch, stdout=msg, rc=9)
    with pytest.raises(GPUQueryError, match="couldn't communicate") as err:
        query_gpus()
    plan = install.choose_mxnet(err.value)
    assert plan.package == 'mxnet==1.9.1'
    assert '没有能用的驱动' in plan.warning and '再从头运行本笔记本' in plan.warning
    assert len(plan.warning.splitlines()) == 1


def test_override_and_its_check(monkeypatch):
    monkeypatch.setenv('D2LZH_MXNET_PACKAGE', 'mxnet-cu112')
    plan = install.choose_mxnet([])
    assert plan.package == 'mxnet-cu112==1.9.1' and plan.cuda11
    monkeypatch.setenv('D2LZH_MXNET_PACKAGE', 'mxnet-cu999')
    with pytest.raises(install.SetupError, match="'mxnet-cu999' 无效"):
        install.choose_mxnet([])


def _offline(monkeypatch):
    """pip without any index or local wheel folder: what a runtime without network sees."""
    monkeypatch.setenv('PIP_CONFIG_FILE', os.devnull)
    monkeypatch.setenv('PIP_NO_INDEX', '1')
    monkeypatch.delenv('PIP_FIND_LINKS', raising=False)
    monkeypatch.delenv('PIP_EXTRA_INDEX_URL', raising=False)


def test_pip_failure_is_one_line_with_the_fix(monkeypatch):
    _offline(monkeypatch)
    with pytest.raises(install.SetupError) as err:
        install.run_pip(['install', '--no-deps', 'mxnet-cu112==1.9.1'], 'mxnet-cu112==1.9.1')
    first, fix = str(err.value).split('\n')
    assert first.startswith('pip 不能安装 mxnet-cu112==1.9.1：ERROR:')
    assert 'mxnet-cu112' in first and '再运行这个单元格或命令' in fix
    assert d2lzh.setup.installed_mxnet() == ('mxnet', '1.9.1')   # nothing changed


def test_cuda11_install_failure_leaves_nothing(tmp_path, monkeypatch):
    _offline(monkeypatch)
    target = tmp_path / 'd2lzh-cuda11'
    with pytest.raises(install.SetupError, match='CUDA 11 库'):
        install.install_cuda11(target)
    assert list(tmp_path.iterdir()) == []


def test_cuda11_install_is_atomic_and_done_once(tmp_path, monkeypatch):
    calls = []

    def fake_pip(args, what, why=None):
        calls.append(args)
        folder = Path(args[args.index('--target') + 1])
        (folder / 'nvidia' / 'cuda_runtime' / 'lib').mkdir(parents=True)
        (folder / 'nvidia' / 'cuda_runtime' / 'lib' / 'libcudart.so.11.0').write_bytes(b'')

    monkeypatch.setattr(install, 'run_pip', fake_pip)
    target = tmp_path / 'd2lzh-cuda11'
    assert install.install_cuda11(target) == target
    assert calls[0][:2] == ['install', '--no-deps'] and calls[0][-len(cuda11.PACKAGES):] == \
        list(cuda11.PACKAGES)
    assert (target / 'nvidia' / 'cuda_runtime' / 'lib' / 'libcudart.so.11.0').exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ['d2lzh-cuda11']
    install.install_cuda11(target)
    assert len(calls) == 1                        # the same set is not downloaded again


def test_right_build_installed_means_nothing_to_do(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv('PATH', str(tmp_path))    # no GPU: the CPU build, which .venv has
    monkeypatch.delenv('D2LZH_MXNET_PACKAGE', raising=False)
    monkeypatch.setattr(install, 'run_pip', lambda *a, **k: pytest.fail('pip was called'))
    plan = install.ensure_mxnet()
    assert plan.package == 'mxnet==1.9.1' and capsys.readouterr().out == ''


def test_wrong_build_already_imported_asks_for_a_restart(tmp_path, monkeypatch):
    monkeypatch.setenv('D2LZH_MXNET_PACKAGE', 'mxnet-cu112')
    monkeypatch.setenv('D2LZH_CUDA11_DIR', str(tmp_path))
    (tmp_path / '.d2lzh-packages').write_text('\n'.join(cuda11.PACKAGES) + '\n')
    monkeypatch.setitem(sys.modules, 'mxnet', object())
    monkeypatch.setattr(install, 'run_pip', lambda *a, **k: pytest.fail('pip was called'))
    with pytest.raises(install.SetupError, match='请重启内核'):
        install.ensure_mxnet()


def test_torch_new_enough_is_kept_old_one_is_replaced(monkeypatch):
    monkeypatch.setattr(install, 'run_pip', lambda *a, **k: pytest.fail('pip was called'))
    monkeypatch.setattr(install, '_version', lambda name: '2.13.0+cpu')
    assert install.ensure_torch() == '2.13.0+cpu'
    monkeypatch.setattr(install, '_version', lambda name: '2.3.1')
    monkeypatch.setitem(sys.modules, 'torch', object())
    with pytest.raises(install.SetupError, match='已经导入了 torch 2.3.1'):
        install.ensure_torch()


def test_enable_is_off_in_a_checkout_and_on_demand(monkeypatch):
    monkeypatch.delenv('D2LZH_AUTO_INSTALL', raising=False)
    d2lzh.setup.enable()
    assert not d2lzh.setup.enabled()        # make run/test: the pinned .venv, untouched
    monkeypatch.setenv('D2LZH_AUTO_INSTALL', '0')
    d2lzh.setup.enable()
    assert not d2lzh.setup.enabled()


def test_hook_runs_for_notebook_code_only(tmp_path):
    """In a fresh interpreter: `import mxnet` from __main__ goes through ensure_mxnet, the
    same import from another library does not, and a failure is retried next time."""
    (tmp_path / 'probe_lib.py').write_text('import mxnet\n')
    code = textwrap.dedent('''
        import sys
        import d2lzh.setup
        import d2lzh.setup.install as inst
        calls = []
        def fake():
            calls.append('mxnet')
            if len(calls) == 1:
                raise inst.SetupError('no network')
            return inst.Plan('mxnet==1.9.1', False, 'test', None)
        inst.ensure_mxnet = fake
        d2lzh.setup.enable()
        assert d2lzh.setup.enabled()
        import probe_lib                      # a library probing for mxnet: no install
        print(calls)
        for m in [m for m in sys.modules if m == 'mxnet' or m.startswith('mxnet.')]:
            del sys.modules[m]
        try:
            import mxnet
        except inst.SetupError as err:
            print('error:', err, err.__cause__, err.__suppress_context__)
        import mxnet
        print(calls, mxnet.__version__)
        d2lzh.setup.disable()
        assert not d2lzh.setup.enabled()
    ''')
    env = dict(os.environ, D2LZH_AUTO_INSTALL='1', PYTHONPATH=str(tmp_path))
    out = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, env=env,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ['[]', 'error: no network None True',
                                       "['mxnet', 'mxnet'] 1.9.1"]


# ---------------------------------------------------------------------------- the setup cell

@pytest.fixture(scope='module')
def bare_venv(tmp_path_factory):
    """A fresh venv without d2lzh (what a cloud runtime looks like to the setup cell)."""
    path = tmp_path_factory.mktemp('bare') / 'venv'
    subprocess.run([sys.executable, '-m', 'venv', str(path)], check=True, timeout=120)
    return path / 'bin' / 'python'


def _run_setup_cell(python, cwd, **env):
    sys.path.insert(0, str(ROOT / 'scripts'))
    try:
        import make_setup_cell
    finally:
        sys.path.pop(0)
    cell = make_setup_cell.setup_cell_source()
    full = {k: v for k, v in os.environ.items() if not k.startswith('D2LZH_')}
    full.update(env)
    return subprocess.run([str(python), '-c', cell], capture_output=True, text=True,
                          cwd=cwd, env=full, timeout=300)


def _has_d2lzh(python):
    return subprocess.run([str(python), '-c', 'import d2lzh'], capture_output=True,
                          cwd='/').returncode == 0


def test_setup_cell_with_bad_source_says_what_to_do(bare_venv, tmp_path):
    out = _run_setup_cell(bare_venv, tmp_path, D2LZH_SOURCE=str(tmp_path / 'no-such-dir'))
    assert out.returncode == 1
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 2, out.stderr
    assert lines[0].startswith(f'pip 不能从 {tmp_path / "no-such-dir"} 安装 d2lzh')
    assert 'D2LZH_SOURCE' in lines[1] and '再运行这个单元格' in lines[1]
    assert not _has_d2lzh(bare_venv)


def test_setup_cell_without_network_says_what_to_do(bare_venv, tmp_path, monkeypatch):
    _offline(monkeypatch)
    out = _run_setup_cell(bare_venv, tmp_path, D2LZH_SOURCE=str(ROOT), PIP_NO_INDEX='1',
                          PIP_CONFIG_FILE=os.devnull)
    assert out.returncode == 1
    assert out.stderr.startswith(f'pip 不能从 {ROOT} 安装 d2lzh：ERROR')
    assert len(out.stderr.strip().splitlines()) == 2
    assert not _has_d2lzh(bare_venv)


def test_command_line_prints_the_plan(tmp_path, monkeypatch, capsys):
    fake_nvidia_smi(tmp_path, monkeypatch, stdout='Tesla T4, 7.5\n')
    monkeypatch.setenv('D2LZH_CUDA11_DIR', str(tmp_path / 'cuda11'))
    assert install.main(['plan']) == 0
    out = capsys.readouterr().out
    assert out.startswith('mxnet-cu112==1.9.1：Tesla T4 用的 GPU 版')
    assert str(tmp_path / 'cuda11') in out
    monkeypatch.setenv('D2LZH_MXNET_PACKAGE', 'mxnet-cu999')
    assert install.main(['plan']) == 1
    assert "'mxnet-cu999' 无效" in capsys.readouterr().err


def test_no_driver_keeps_the_cpu_build_and_says_so_in_one_line(tmp_path, monkeypatch, capsys):
    fake_nvidia_smi(tmp_path, monkeypatch, rc=9,
                    stdout="NVIDIA-SMI has failed because it couldn't communicate with the "
                           "NVIDIA driver.\n")
    monkeypatch.setattr(install, 'run_pip', lambda *a, **k: pytest.fail('pip was called'))
    plan = install.ensure_mxnet()                # .venv has the CPU build: nothing to install
    assert plan.package == 'mxnet==1.9.1'
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 1 and out[0].startswith('d2lzh：这个运行时有 NVIDIA 的 GPU 工具')


def test_makefile_command_from_the_checkout_root(tmp_path):
    """`python -m d2lzh.setup.install mxnet`, what the Makefile runs: from the repository root
    (d2lzh not installed needed), the right build already there -> says so, installs nothing;
    `cuda11` with the set already in place prints the folder; a wrong argument is refused."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(('D2LZH_', 'PIP_'))}
    env.update(D2LZH_MXNET_PACKAGE='mxnet', PIP_NO_INDEX='1', PIP_CONFIG_FILE=os.devnull,
               D2LZH_CUDA11_DIR=str(tmp_path), PYTHONPATH='')
    (tmp_path / '.d2lzh-packages').write_text('\n'.join(cuda11.PACKAGES) + '\n')

    def run(*args):
        return subprocess.run([sys.executable, '-m', 'd2lzh.setup.install', *args], cwd=ROOT,
                              env=env, capture_output=True, text=True, timeout=120)
    out = run('mxnet')
    assert out.returncode == 0, out.stderr
    assert out.stdout == ('d2lzh：mxnet==1.9.1 已经装好'
                          '（D2LZH_MXNET_PACKAGE=mxnet 指定了它）\n')
    out = run('cuda11')
    assert (out.returncode, out.stdout) == (0, f'{tmp_path}\n'), out.stderr
    out = run('nonsense')
    assert out.returncode == 2 and out.stderr.startswith('用法：python -m d2lzh.setup.install')


def test_other_build_is_uninstalled_and_the_wanted_one_installed_without_deps(
        tmp_path, monkeypatch, capsys):
    """D2LZH_MXNET_PACKAGE=mxnet-cu112 where the CPU build is installed, under numpy 2 and
    without requests: uninstall mxnet, the CUDA 11 set, mxnet-cu112 --no-deps, requests."""
    calls, whys = [], {}
    monkeypatch.setenv('D2LZH_MXNET_PACKAGE', 'mxnet-cu112')
    monkeypatch.setenv('D2LZH_CUDA11_DIR', str(tmp_path / 'cuda11'))
    monkeypatch.setattr(install, 'installed_mxnet', lambda: ('mxnet', '1.9.1'))
    monkeypatch.setattr(install, '_version', lambda name: {'numpy': '2.1.3'}.get(name))
    monkeypatch.delitem(sys.modules, 'mxnet', raising=False)   # as in a fresh kernel

    def fake_pip(args, what, why=None):
        if '--target' in args:
            Path(args[args.index('--target') + 1]).mkdir(parents=True)
        calls.append(args[:2] if '--target' not in args else ['install', '--target'])
        whys[what] = why
    monkeypatch.setattr(install, 'run_pip', fake_pip)
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, 'find_spec',
                        lambda name, *a: None if name == 'requests' else find_spec(name, *a))
    plan = install.ensure_mxnet()
    assert plan.package == 'mxnet-cu112==1.9.1'
    assert calls == [['install', '--target'], ['uninstall', '--yes'],
                     ['install', '--no-deps'], ['install', 'requests>=2.20,<3']]
    assert capsys.readouterr().out == (
        'd2lzh：卸载另一个 MXNet 版本 mxnet 1.9.1\n')
    assert whys['mxnet-cu112==1.9.1'] == (
        '：D2LZH_MXNET_PACKAGE=mxnet-cu112 指定了它（用 --no-deps：它的元数据要求 numpy<2，'
        '会换掉这个运行时的 numpy 2.1.3；d2lzh 让 MXNet 能用 numpy 2）')
    assert whys['requests'] == '（MXNet 要导入它）' and str(tmp_path) in whys[
        'mxnet-cu112 用的 NVIDIA CUDA 11 库']


def test_run_pip_says_what_and_why_and_how_long(monkeypatch, capsys):
    monkeypatch.setattr(subprocess, 'run', lambda *a, **k: subprocess.CompletedProcess(a, 0))
    install.run_pip(['install', 'x'], 'x==1', ': because')
    out = capsys.readouterr().out.splitlines()
    assert out[0] == 'd2lzh：正在安装 x==1: because ...'
    assert out[1].startswith('d2lzh：x==1 装好了，用时 ') and out[1].endswith(' 秒')
