"""Install the framework build that fits this machine (beyond the book): the first ``import
mxnet`` / ``import torch`` after :func:`d2lzh.setup.enable` (a notebook's setup cell, on a cloud
runtime without MXNet) runs :func:`ensure_mxnet` / :func:`ensure_torch`, which install it into
the kernel's environment, saying what and why (no restart; numpy and torch never downgraded).
``python -m d2lzh.setup.install [plan|mxnet|torch|cuda11]`` prints the plan or installs (the
Makefile's MXNet install, run from the checkout before d2lzh is installed)."""
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import time
from collections import namedtuple
from importlib import metadata
from pathlib import Path

from .. import project
from . import cuda11, installed_mxnet
from .gpus import GPUQueryError, query_gpus

MXNET_VERSION = '1.9.1'
MIN_TORCH = (2, 4)
CUDA11_CC = ((5, 0), (8, 9))   # mxnet-cu112 has code for sm_50, 60, 70, 80, 86, no PTX

Plan = namedtuple('Plan', 'package cuda11 reason warning')
Plan.__doc__ = """What :func:`choose_mxnet` decided: ``package`` (e.g. ``'mxnet-cu112==1.9.1'``),
``cuda11`` (bool: NVIDIA's CUDA 11 packages too), ``reason`` (a sentence), ``warning`` (or None)."""


class SetupError(ImportError):
    """The framework could not be installed; the message says what failed and what to do."""


def choose_mxnet(gpus=None, notebook=None):
    """The :class:`Plan` for ``gpus`` (list of GPU, the GPUQueryError ``query_gpus()`` raised,
    or None: query now): no NVIDIA GPU -> ``mxnet`` (CPU); compute capability 5.0-8.9 (P100,
    T4, V100, A100, A10, L4) -> ``mxnet-cu112`` with NVIDIA's CUDA 11 libraries (1.6 GB);
    newer (H100, H200, Blackwell; the warning links the PyTorch twin of the MXNet notebook
    ``notebook``), older, unknown, or no answer -> the CPU build, with a warning saying why.
    ``$D2LZH_MXNET_PACKAGE`` (``mxnet`` or ``mxnet-cu112``, else SetupError) wins."""
    cpu, cu112 = f'mxnet=={MXNET_VERSION}', f'mxnet-cu112=={MXNET_VERSION}'
    forced = os.environ.get('D2LZH_MXNET_PACKAGE', '').strip()
    if forced:
        if forced not in ('mxnet', 'mxnet-cu112'):
            raise SetupError(f'D2LZH_MXNET_PACKAGE={forced!r} 无效：请用 mxnet 或 '
                             'mxnet-cu112（或者不设它，让 d2lzh 自己选）。')
        return Plan(cpu if forced == 'mxnet' else cu112, forced == 'mxnet-cu112',
                    f'D2LZH_MXNET_PACKAGE={forced} 指定了它', None)
    try:
        gpus = query_gpus() if gpus is None else gpus
    except GPUQueryError as err:
        gpus = err
    if isinstance(gpus, GPUQueryError):
        return Plan(cpu, False, 'CPU 版，因为 NVIDIA 驱动没有应答',
                    f'这个运行时有 NVIDIA 的 GPU 工具，却没有能用的驱动（{gpus}）。MXNet 在 '
                    'CPU 上运行。要用 GPU，请换成带 GPU 的运行时（Colab：Runtime > Change '
                    'runtime type；Kaggle：Settings > Accelerator）或装上驱动，再从头运行本笔记本。')
    if not gpus:
        return Plan(cpu, False, '这里没有 NVIDIA GPU（没有 nvidia-smi），所以用 CPU 版', None)
    for g in gpus:
        if g.compute_capability and CUDA11_CC[0] <= g.compute_capability <= CUDA11_CC[1]:
            return Plan(cu112, True, f'{g.name} 用的 GPU 版（计算能力 %d.%d；mxnet-cu112 '
                        '能在 5.0-8.9 上运行）' % g.compute_capability, None)
    g = gpus[0]
    if g.compute_capability is None:
        return Plan(cpu, False, f'CPU 版，因为不知道 {g.name} 的计算能力',
                    f'无法从 nvidia-smi 读出 GPU "{g.name}" 的计算能力，所以安装 MXNet 的 CPU '
                    '版。如果它是 Maxwell 到 Ada 的 GPU（计算能力 5.0-8.9），请设 '
                    'D2LZH_MXNET_PACKAGE=mxnet-cu112，重启内核，再运行本笔记本。')
    cc = '%d.%d' % g.compute_capability
    if g.compute_capability > CUDA11_CC[1]:
        nb = project.find(notebook) if notebook else None
        twin = (project.url(nb.twin, 'colab') if nb and nb.edition == 'mxnet' and nb.twin
                else project.url('notebooks/pytorch', 'tree'))
        return Plan(cpu, False, f'CPU 版，因为 MXNet 不能在 {g.name}（计算能力 {cc}）上运行',
                    f'{g.name}（计算能力 {cc}）上不能运行 MXNet：最后一个 GPU 版 mxnet-cu112 '
                    '1.9.1 的 GPU 代码只到计算能力 8.6（能在 5.0-8.9 上运行），没有 Hopper 及更新'
                    '架构的。这里 MXNet 在 CPU 上运行；本节的 PyTorch 版会用 GPU：'
                    + (twin or '本项目的 notebooks/pytorch/ 文件夹'))
    return Plan(cpu, False, f'CPU 版，因为 {g.name}（计算能力 {cc}）对 mxnet-cu112 来说太旧',
                f'{g.name}（计算能力 {cc}）比 mxnet-cu112 支持的（5.0 及更新）旧。这里 MXNet '
                '在 CPU 上运行。')


def run_pip(args, what, why=None):
    """``python -m pip <args> --quiet`` (list of str) for ``what`` (str) in this interpreter;
    with ``why`` (str), prints ``installing <what><why> ...`` and the seconds it took. Raises
    :class:`SetupError` with pip's reason in one line and the fix."""
    if why is not None:
        print(f'd2lzh：正在安装 {what}{why} ...', flush=True)
    start = time.perf_counter()
    result = subprocess.run([sys.executable, '-m', 'pip', *args, '--disable-pip-version-check',
                             '--no-input', '--quiet'], capture_output=True, text=True)
    if result.returncode != 0:
        lines = [line.strip() for line in (result.stderr or '').splitlines() if line.strip()]
        reason = ([line for line in lines if line.startswith('ERROR')]
                  or [line for line in lines if line.startswith('error')]
                  or lines or [f'pip 的退出码是 {result.returncode}'])[0][:300]
        raise SetupError(f'pip 不能安装 {what}：{reason}\n请确认这个运行时能访问软件包索引'
                         '（Kaggle：打开 Settings > Internet；在代理后面请设 HTTPS_PROXY），'
                         '再运行这个单元格或命令。')
    importlib.invalidate_caches()
    if why is not None:
        print(f'd2lzh：{what} 装好了，用时 {time.perf_counter() - start:.0f} 秒')


def install_cuda11(target=None):
    """Install :data:`d2lzh.setup.cuda11.PACKAGES` into ``target`` (default: ``target_dir()``)
    unless it holds them already; return it (pathlib.Path). pip fills a folder beside it, renamed
    into place only when pip succeeded: nothing is left after a failure. :class:`SetupError`."""
    target, wanted = Path(target or cuda11.target_dir()), '\n'.join(cuda11.PACKAGES) + '\n'
    stamp = target / '.d2lzh-packages'
    if stamp.exists() and stamp.read_text() == wanted:
        return target
    partial = target.with_name(target.name + f'.partial-{os.getpid()}')
    shutil.rmtree(partial, ignore_errors=True)
    try:
        run_pip(['install', '--no-deps', '--target', str(partial), *cuda11.PACKAGES],
                'mxnet-cu112 用的 NVIDIA CUDA 11 库',
                f'（约 1.6 GB，每个运行时装一次），装到 {target}')
        (partial / stamp.name).write_text(wanted)
        shutil.rmtree(target, ignore_errors=True)
        partial.rename(target)
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    return target


def _version(name):
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def ensure_mxnet(notebook=None, verbose=False):
    """Install the MXNet build that fits this machine unless it is there; return the :class:`Plan`.
    Prints its warning and what it installs and why (``verbose``: also that nothing was to do).
    ``notebook``: as for :func:`choose_mxnet` (default: the running notebook, if Jupyter tells).
    :class:`SetupError`: pip failed, or another MXNet build is imported in this kernel already."""
    names = (notebook, getattr(sys.modules.get('__main__'), '__session__', None),
             os.environ.get('JPY_SESSION_NAME'))   # JupyterLab and VS Code tell it
    notebook = next((Path(str(n)).name for n in names if n and str(n).endswith('.ipynb')), notebook)
    plan = choose_mxnet(None, notebook)
    wanted, have = plan.package.split('==')[0], installed_mxnet()
    if plan.warning:
        print(f'd2lzh：{plan.warning}')
    if plan.cuda11:
        install_cuda11()
    if have == (wanted, MXNET_VERSION):
        if verbose:
            print(f'd2lzh：{plan.package} 已经装好（{plan.reason}）')
    elif 'mxnet' in sys.modules:
        raise SetupError(f'这个内核已经导入了 MXNet（{" ".join(have or ())}），但这台机器需要 '
                         f'{wanted}：请重启内核，再运行本笔记本。')
    else:
        if have is not None and have[0] != wanted:
            print(f'd2lzh：卸载另一个 MXNet 版本 {" ".join(have)}', flush=True)
            run_pip(['uninstall', '--yes', have[0]], f'另一个 MXNet 版本（{have[0]}）')
        numpy = _version('numpy')
        note = '' if not numpy or numpy.startswith('1.') else (
            f'（用 --no-deps：它的元数据要求 numpy<2，会换掉这个运行时的 numpy {numpy}；'
            'd2lzh 让 MXNet 能用 numpy 2）')
        run_pip(['install', '--no-deps', plan.package], plan.package, f'：{plan.reason}{note}')
    if importlib.util.find_spec('requests') is None:   # MXNet imports it; --no-deps skips it
        run_pip(['install', 'requests>=2.20,<3'], 'requests', '（MXNet 要导入它）')
    return plan


def ensure_torch():
    """Make sure torch >= 2.4 is installed (the runtime's own, else ``torch>=2.4``, the CPU
    build without an NVIDIA GPU, saying why); return its version (str). Raises
    :class:`SetupError` when pip fails or an older torch is already imported in this kernel."""
    have = _version('torch')
    if have and tuple(int(x) for x in re.findall(r'\d+', have)[:2]) >= MIN_TORCH:
        return have
    if have and 'torch' in sys.modules:
        raise SetupError(f'这个内核已经导入了 torch {have}，而 PyTorch 版的笔记本需要 '
                         'torch >= 2.4：请重启内核，再运行本笔记本。')
    try:
        gpu = bool(query_gpus())
    except GPUQueryError:
        gpu = False
    why = f'torch {have} 比 2.4 旧' if have else '没有安装 PyTorch'
    run_pip(['install', 'torch>=%d.%d' % MIN_TORCH] + (
        [] if gpu else ['--extra-index-url', 'https://download.pytorch.org/whl/cpu']),
        'torch>=2.4', f'（{why}；{"CUDA" if gpu else "CPU"} 版）')
    return _version('torch')


def main(argv=None):
    """The command line (module docstring): exit status 0, 1 (the reason printed) or 2 (usage)."""
    what = (sys.argv[1:] if argv is None else list(argv)) or ['plan']
    if what not in (['plan'], ['mxnet'], ['torch'], ['cuda11']):
        print('用法：python -m d2lzh.setup.install [plan|mxnet|torch|cuda11]：说明这台机器该装'
              '哪个 MXNet 版本及原因，或者安装它、PyTorch 或 CUDA 11 的库', file=sys.stderr)
        return 2
    try:
        if what == ['plan']:
            plan = choose_mxnet()
            print(f'{plan.package}：{plan.reason}'
                  + (f'（另把 CUDA 11 的库装到 {cuda11.target_dir()}）' if plan.cuda11 else '')
                  + (f'\n{plan.warning}' if plan.warning else ''))
        elif what == ['mxnet']:
            ensure_mxnet(verbose=True)
        elif what == ['torch']:
            print(f'd2lzh：torch {ensure_torch()}')
        else:
            print(install_cuda11())
    except SetupError as err:
        print(f'错误：{err}', file=sys.stderr)
        return 1
    return 0


if __name__ == '__main__':
    sys.exit(main())
