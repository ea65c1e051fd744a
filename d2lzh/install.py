"""Choose and install the framework build that fits this machine (beyond the book).

A notebook opened alone on a cloud notebook (Colab, Kaggle, SageMaker Studio Lab, any
Jupyter) has neither ``d2lzh`` nor MXNet. Its first cell, the setup cell that
``scripts/make_setup_cell.py`` writes into every notebook, pip-installs ``d2lzh`` when it is
not importable and then calls :func:`enable`. From then on, the first ``import mxnet`` or
``import torch`` of the kernel (directly, or through ``import d2lzh as d2l`` /
``from d2lzh import torch as d2l``) first makes sure the build that fits the machine is
installed, with pip, into the running kernel's environment, and prints what it installs and
why. So one setup cell serves both editions: the edition is told by what the notebook imports
next, and only that framework is installed. No restart is needed; numpy and torch are never
downgraded.

Which build (:func:`choose_mxnet`, from ``nvidia-smi``'s answer):

* no NVIDIA GPU (no ``nvidia-smi``) -> ``mxnet==1.9.1`` (CPU);
* compute capability 5.0-8.9 (Maxwell to Ada: P100, T4, V100, A100, A10, L4) ->
  ``mxnet-cu112==1.9.1`` plus NVIDIA's CUDA 11 libraries (:data:`d2lzh._cuda11.PACKAGES`,
  about 1.6 GB) with ``pip install --target`` into a folder of their own
  (:func:`d2lzh._cuda11.target_dir`), never over the runtime's torch;
* 9.0 and newer (H100, H200, Blackwell), older than 5.0, a GPU whose capability cannot be
  read, or a GPU whose driver does not answer -> ``mxnet`` (CPU) and one message that names
  the GPU and the reason (for Hopper: the PyTorch notebook of the same section).

``$D2LZH_MXNET_PACKAGE`` (``mxnet`` or ``mxnet-cu112``) overrides the choice.
PyTorch: the runtime's torch is used when it is >= 2.4, otherwise ``torch>=2.4`` is installed.

MXNet 1.9.1 declares ``numpy<2``, so pip would refuse it (or downgrade numpy) next to the
numpy 2 of today's runtimes; it is installed with ``--no-deps`` and works there through
:mod:`d2lzh._compat`. Its one other import-time dependency, ``requests``, is installed only
if missing.

Under ``make`` (d2lzh imported from a source checkout, everything pinned), :func:`enable`
does nothing, so the notebooks behave exactly as without it. ``$D2LZH_AUTO_INSTALL=0``
switches it off anywhere, ``=1`` on even in a checkout.
"""
import importlib
import importlib.abc
import importlib.metadata
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import time
from collections import namedtuple
from pathlib import Path

from . import _compat, _cuda11

MXNET_VERSION = '1.9.1'
MIN_TORCH = (2, 4)
# mxnet-cu112 1.9.1 has GPU code for sm_50, 60, 70, 80 and 86 and no PTX.
CUDA11_MIN_CC = (5, 0)
CUDA11_MAX_CC = (8, 9)
# The PyTorch notebook of the same section as each MXNet notebook (file names).
PYTORCH_TWINS = {
    '01_use-gpu.ipynb': '01_use-gpu.ipynb',
    '02_hybridize.ipynb': '02_hybridize.ipynb',
    '03_async-computation.ipynb': '03_async-computation.ipynb',
    '04_auto-parallelism.ipynb': '04_auto-parallelism.ipynb',
    '05_multiple-gpus.ipynb': '05_multiple-gpus.ipynb',
    '06_multiple-gpus-gluon.ipynb': '06_multiple-gpus-concise.ipynb',
    '07_distributed-training.ipynb': '08_distributed-training.ipynb',
}

GPU = namedtuple('GPU', 'name compute_capability')
GPU.__doc__ = """One NVIDIA GPU: its name and compute capability as (major, minor), or None."""

Plan = namedtuple('Plan', 'package cuda11 reason warning')
Plan.__doc__ = """What :func:`choose_mxnet` decided.

package: the pip requirement of the MXNet build (``'mxnet==1.9.1'`` or
``'mxnet-cu112==1.9.1'``); cuda11: whether NVIDIA's CUDA 11 packages are needed too;
reason: one sentence saying why (printed when it is installed); warning: a message for the
reader when a GPU is present but MXNet cannot use it, else None."""


class SetupError(ImportError):
    """The framework could not be installed; the message says what failed and what to do."""


class GPUQueryError(RuntimeError):
    """``nvidia-smi`` exists but did not answer (e.g. a GPU runtime without a working driver)."""


# ---------------------------------------------------------------------------- the GPU query

def query_gpus(timeout=30):
    """The NVIDIA GPUs of this machine, as ``nvidia-smi`` reports them.

    Runs ``nvidia-smi --query-gpu=name,compute_cap --format=csv,noheader``.

    Returns:
        list of :class:`GPU` (empty when there is no ``nvidia-smi``: no NVIDIA GPU or
        driver). A GPU whose capability is not a number (``[N/A]``, or an ``nvidia-smi``
        too old to know the field) has ``compute_capability=None``.

    Raises:
        GPUQueryError: ``nvidia-smi`` is there but fails or times out (driver missing or
            not loaded); the message holds its first line of output.
    """
    exe = shutil.which('nvidia-smi')
    if exe is None:
        return []
    try:
        out = subprocess.run([exe, '--query-gpu=name,compute_cap', '--format=csv,noheader'],
                             capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as err:
        raise GPUQueryError(f'nvidia-smi did not answer: {err}') from None
    text = (out.stdout or '') + (out.stderr or '')
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if any('not a valid field' in line.lower() for line in lines):
        # drivers older than 510 do not know compute_cap: ask for the names alone
        names = subprocess.run([exe, '--query-gpu=name', '--format=csv,noheader'],
                               capture_output=True, text=True, timeout=timeout)
        return [GPU(n.strip(), None) for n in names.stdout.splitlines() if n.strip()]
    if out.returncode != 0:
        raise GPUQueryError(lines[0] if lines else f'nvidia-smi exited with {out.returncode}')
    gpus = []
    for line in (out.stdout or '').splitlines():
        if not line.strip():
            continue
        name, _, cap = line.rpartition(',')
        m = re.fullmatch(r'\s*(\d+)\.(\d+)\s*', cap)
        if not name:
            name, m = line, None
        gpus.append(GPU(name.strip(), (int(m.group(1)), int(m.group(2))) if m else None))
    return gpus


# ---------------------------------------------------------------------------- the choice

def _repository():
    """(owner, repo, branch) of the project, from the package's ``Source`` URL, or None.

    The URL is written once, in pyproject.toml's ``[project.urls]``; it reaches the installed
    package through its metadata, or is read from pyproject.toml in a checkout.
    """
    urls = []
    try:
        urls = importlib.metadata.metadata('d2lzh').get_all('Project-URL') or []
    except importlib.metadata.PackageNotFoundError:
        pass
    text = ' '.join(urls)
    pyproject = Path(__file__).resolve().parent.parent / 'pyproject.toml'
    if 'github.com' not in text and pyproject.exists():
        text = pyproject.read_text()
    m = re.search(r'https://github\.com/([\w.-]+)/([\w.-]+)/tree/([\w./-]+?)["\s,]', text + ' ')
    return m.groups() if m else None


def pytorch_notebook_url(notebook=None):
    """Colab link of the PyTorch notebook of the same section as the MXNet notebook
    ``notebook`` (a file name such as ``05_multiple-gpus.ipynb``), or of the PyTorch
    notebooks' folder on GitHub when the notebook is not known."""
    repository = _repository()
    if repository is None:
        return "the project's notebooks/pytorch/ folder"
    owner, repo, branch = repository
    twin = PYTORCH_TWINS.get(Path(notebook).name) if notebook else None
    if twin:
        return (f'https://colab.research.google.com/github/{owner}/{repo}/blob/{branch}/'
                f'notebooks/pytorch/{twin}')
    return f'https://github.com/{owner}/{repo}/tree/{branch}/notebooks/pytorch'


def _current_notebook():
    """The running notebook's file name where Jupyter tells it (JupyterLab, VS Code), else None."""
    main = sys.modules.get('__main__')
    for value in (getattr(main, '__session__', None), os.environ.get('JPY_SESSION_NAME')):
        if value and str(value).endswith('.ipynb'):
            return Path(str(value)).name
    return None


def choose_mxnet(gpus, notebook=None):
    """Choose the MXNet build for these GPUs.

    Args:
        gpus: list of :class:`GPU` (from :func:`query_gpus`; empty: no NVIDIA GPU), or a
            :class:`GPUQueryError` instance when ``nvidia-smi`` failed.
        notebook: the running notebook's file name, for the link to its PyTorch twin.

    Returns:
        :class:`Plan`. ``$D2LZH_MXNET_PACKAGE`` (``mxnet`` or ``mxnet-cu112``) wins over the
        GPUs.

    Raises:
        SetupError: ``$D2LZH_MXNET_PACKAGE`` names another package.
    """
    cpu, cu112 = f'mxnet=={MXNET_VERSION}', f'mxnet-cu112=={MXNET_VERSION}'
    forced = os.environ.get('D2LZH_MXNET_PACKAGE', '').strip()
    if forced:
        if forced not in ('mxnet', 'mxnet-cu112'):
            raise SetupError(f'D2LZH_MXNET_PACKAGE={forced!r} is not valid: use mxnet or '
                             'mxnet-cu112 (or unset it to let d2lzh choose).')
        return Plan(cpu if forced == 'mxnet' else cu112, forced == 'mxnet-cu112',
                    f'D2LZH_MXNET_PACKAGE={forced} asks for it', None)
    if isinstance(gpus, GPUQueryError):
        return Plan(cpu, False, 'the CPU build, as the NVIDIA driver does not answer',
                    f'This runtime has an NVIDIA GPU tool but no working driver ({gpus}). '
                    'MXNet runs on the CPU. To use the GPU, restart the runtime with a GPU '
                    '(Colab: Runtime > Change runtime type; Kaggle: Settings > Accelerator) '
                    'or install the driver, then run the notebook again from the top.')
    if not gpus:
        return Plan(cpu, False, 'no NVIDIA GPU here (no nvidia-smi), so the CPU build', None)
    usable = [g for g in gpus if g.compute_capability
              and CUDA11_MIN_CC <= g.compute_capability <= CUDA11_MAX_CC]
    if usable:
        g = usable[0]
        cc = '%d.%d' % g.compute_capability
        return Plan(cu112, True,
                    f'the GPU build for {g.name} (compute capability {cc}; mxnet-cu112 runs on '
                    '5.0-8.9)', None)
    g = gpus[0]
    if g.compute_capability is None:
        return Plan(cpu, False, f'the CPU build, as the compute capability of {g.name} is unknown',
                    f'Could not read the compute capability of GPU "{g.name}" from '
                    'nvidia-smi, so the CPU build of MXNet is installed. If it is a Maxwell to '
                    'Ada GPU (compute capability 5.0-8.9), set D2LZH_MXNET_PACKAGE=mxnet-cu112, '
                    'restart the kernel and run the notebook again.')
    cc = '%d.%d' % g.compute_capability
    if g.compute_capability > CUDA11_MAX_CC:
        return Plan(cpu, False,
                    f'the CPU build, as MXNet cannot run on {g.name} (compute capability {cc})',
                    f'{g.name} (compute capability {cc}) cannot run MXNet: mxnet-cu112 1.9.1, '
                    'the last GPU build, has GPU code up to compute capability 8.6 (it runs on '
                    '5.0-8.9) and none for Hopper or newer. MXNet runs on the CPU here; the '
                    'PyTorch edition of this section uses the GPU: '
                    f'{pytorch_notebook_url(notebook)}')
    return Plan(cpu, False,
                f'the CPU build, as {g.name} (compute capability {cc}) is too old for mxnet-cu112',
                f'{g.name} (compute capability {cc}) is older than mxnet-cu112 supports (5.0 '
                'and newer). MXNet runs on the CPU here.')


# ---------------------------------------------------------------------------- installing

def _distribution_version(name):
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def installed_mxnet():
    """The installed MXNet distribution, ``'mxnet'`` or ``'mxnet-cu112'`` (or another
    ``mxnet-*`` build), or None when MXNet is not installed."""
    for dist in importlib.metadata.distributions():
        name = (dist.metadata['Name'] or '').lower()
        if name == 'mxnet' or name.startswith('mxnet-'):
            return name
    return None


def _pip_failure(result):
    """The one line of pip's output that says why it failed."""
    lines = [line.strip() for line in (result.stderr or '').splitlines() if line.strip()]
    errors = ([line for line in lines if line.startswith('ERROR')]
              or [line for line in lines if line.startswith('error')])
    line = (errors or lines or [f'pip exited with {result.returncode}'])[0]
    return line[:300]


def run_pip(args, what, quiet=True):
    """``python -m pip <args>`` for the running interpreter's environment.

    Args:
        args: list of str, pip's arguments after ``pip``.
        what: str, what is being installed, for the error message.

    Raises:
        SetupError: pip failed; the message has pip's own reason in one line and the fix.
    """
    cmd = [sys.executable, '-m', 'pip', *args, '--disable-pip-version-check', '--no-input']
    if quiet:
        cmd.append('--quiet')
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0:
        raise SetupError(
            f'pip could not install {what}: {_pip_failure(result)}\n'
            'Check that this runtime can reach the package index (Kaggle: Settings > Internet '
            'on; behind a proxy set HTTPS_PROXY), then run the cell again.')
    return result


def install_cuda11(target=None):
    """Install NVIDIA's CUDA 11 libraries for mxnet-cu112 into their own folder.

    Installs :data:`d2lzh._cuda11.PACKAGES` with ``pip install --target`` into a temporary
    folder beside ``target`` (default :func:`d2lzh._cuda11.target_dir`) and renames it into
    place only when pip succeeded, so a failed or interrupted download leaves nothing
    behind. Does nothing when ``target`` already holds this exact set.

    Returns:
        pathlib.Path: the folder. Raises :class:`SetupError` when pip fails.
    """
    target = Path(target or _cuda11.target_dir())
    stamp = target / '.d2lzh-packages'
    wanted = '\n'.join(_cuda11.PACKAGES) + '\n'
    if stamp.exists() and stamp.read_text() == wanted:
        return target
    partial = target.with_name(target.name + f'.partial-{os.getpid()}')
    shutil.rmtree(partial, ignore_errors=True)
    try:
        run_pip(['install', '--no-deps', '--target', str(partial), *_cuda11.PACKAGES],
                'the CUDA 11 libraries for mxnet-cu112')
        (partial / '.d2lzh-packages').write_text(wanted)
        shutil.rmtree(target, ignore_errors=True)
        partial.rename(target)
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    return target


def _ensure_requests():
    """MXNet imports requests at import time; --no-deps did not bring it."""
    if importlib.util.find_spec('requests') is None:
        run_pip(['install', 'requests>=2.20,<3'], 'requests (needed by MXNet)')
        importlib.invalidate_caches()


def ensure_mxnet(notebook=None):
    """Make sure the MXNet build that fits this machine is installed (see the module doc).

    Prints what it installs and why, and the plan's warning; prints nothing when the right
    build is already there. Returns the :class:`Plan`.

    Raises:
        SetupError: pip failed, or MXNet of the wrong build is already imported in this
            kernel (restart the kernel and run again).
    """
    try:
        gpus = query_gpus()
    except GPUQueryError as err:
        gpus = err
    plan = choose_mxnet(gpus, notebook or _current_notebook())
    wanted = plan.package.split('==')[0]
    have = installed_mxnet()
    if plan.warning:
        print(f'd2lzh: {plan.warning}')
    if plan.cuda11:
        stamp = _cuda11.target_dir() / '.d2lzh-packages'
        if not stamp.exists():
            print(f'd2lzh: installing NVIDIA\'s CUDA 11 libraries for mxnet-cu112 (about 1.6 GB, '
                  f'once per runtime) into {_cuda11.target_dir()} ...', flush=True)
            start = time.perf_counter()
            install_cuda11()
            print(f'd2lzh: CUDA 11 libraries installed in {time.perf_counter() - start:.0f} s')
    if have == wanted:
        _ensure_requests()
        return plan
    if 'mxnet' in sys.modules:
        raise SetupError(f'MXNet ({have}) is already imported in this kernel but this machine '
                         f'needs {wanted}: restart the kernel and run the notebook again.')
    why = plan.reason if have is None else f'{have} is installed, but {plan.reason}'
    note = ''
    numpy_version = _distribution_version('numpy') or ''
    if not numpy_version.startswith('1.'):
        note = (f' (with --no-deps: its metadata asks for numpy<2, which would replace this '
                f'runtime\'s numpy {numpy_version}; d2lzh makes MXNet work with numpy 2)')
    print(f'd2lzh: installing {plan.package}: {why}{note} ...', flush=True)
    start = time.perf_counter()
    if have is not None:
        run_pip(['uninstall', '--yes', have], f'the other MXNet build ({have})')
    run_pip(['install', '--no-deps', plan.package], plan.package)
    _ensure_requests()
    importlib.invalidate_caches()
    print(f'd2lzh: {plan.package} installed in {time.perf_counter() - start:.0f} s')
    return plan


def ensure_torch():
    """Make sure PyTorch >= 2.4 is installed: the runtime's own when it is new enough.

    Installs ``torch>=2.4`` otherwise (the CPU build when there is no NVIDIA GPU), printing
    what and why. Returns the installed torch version (str).

    Raises:
        SetupError: pip failed, or an older torch is already imported in this kernel.
    """
    have = _distribution_version('torch')
    if have and tuple(int(x) for x in re.findall(r'\d+', have)[:2]) >= MIN_TORCH:
        return have
    if have and 'torch' in sys.modules:
        raise SetupError(f'torch {have} is already imported in this kernel; the PyTorch '
                         f'notebooks need torch >= 2.4: restart the kernel and run again.')
    why = f'torch {have} is older than 2.4' if have else 'PyTorch is not installed'
    args = ['install', 'torch>=%d.%d' % MIN_TORCH]
    try:
        has_gpu = bool(query_gpus())
    except GPUQueryError:
        has_gpu = False
    if not has_gpu:
        args += ['--extra-index-url', 'https://download.pytorch.org/whl/cpu']
    print(f'd2lzh: installing torch>=2.4 ({why}; the '
          f'{"CUDA" if has_gpu else "CPU"} build) ...', flush=True)
    start = time.perf_counter()
    run_pip(args, 'torch>=2.4')
    importlib.invalidate_caches()
    have = _distribution_version('torch')
    print(f'd2lzh: torch {have} installed in {time.perf_counter() - start:.0f} s')
    return have


# ---------------------------------------------------------------------------- the import hook

class _OnDemandInstaller(importlib.abc.MetaPathFinder):
    """Runs :func:`ensure_mxnet` / :func:`ensure_torch` on the first import of mxnet/torch.

    It finds nothing itself: after installing, it lets the normal finders import the module.
    A failed installation is retried on the next import (re-running the cell).
    """

    def __init__(self):
        self.done = set()

    def find_spec(self, fullname, path=None, target=None):
        if fullname not in ('mxnet', 'torch') or fullname in self.done:
            return None
        if _compat._PrepareOnImport.busy:
            return None  # d2lzh looking mxnet up while it prepares an import that came here
        if not _imported_by_notebook_or_d2lzh():
            return None  # another library probing for mxnet/torch installs nothing
        self.done.add(fullname)
        try:
            if fullname == 'mxnet':
                plan = ensure_mxnet()
                preload = getattr(_cuda11, 'preload', None)
                if plan.cuda11 and preload is not None:
                    preload()
            else:
                ensure_torch()
        except SetupError as err:
            self.done.discard(fullname)
            raise SetupError(str(err)) from None
        return None


def _imported_by_notebook_or_d2lzh():
    """Whether the import being resolved comes from notebook code or from d2lzh itself."""
    frame = sys._getframe(2)
    while frame is not None and (frame.f_code.co_filename.startswith('<frozen')
                                 or frame.f_globals.get('__name__', '').startswith('importlib')):
        frame = frame.f_back
    name = frame.f_globals.get('__name__', '') if frame is not None else ''
    return name == '__main__' or name == 'd2lzh' or name.startswith('d2lzh.')


def _from_checkout():
    return (Path(__file__).resolve().parent.parent / 'pyproject.toml').exists()


def enable():
    """Install the framework on its first import, when it is missing or the wrong build.

    Called by every notebook's setup cell. Does nothing (and costs nothing) when d2lzh runs
    from a source checkout (``make run``/``make test``/``make lab``: the pinned ``.venv``)
    unless ``$D2LZH_AUTO_INSTALL=1``, or anywhere when ``$D2LZH_AUTO_INSTALL=0``. Safe to call
    many times. Returns None (so the setup cell displays nothing); :func:`enabled` tells.
    """
    flag = os.environ.get('D2LZH_AUTO_INSTALL', '').strip()
    if flag == '0' or (flag != '1' and _from_checkout()):
        return
    if not enabled():
        sys.meta_path.insert(0, _OnDemandInstaller())


def enabled():
    """Whether on-demand installation (:func:`enable`) is active in this process."""
    return any(isinstance(f, _OnDemandInstaller) for f in sys.meta_path)


def disable():
    """Remove the hook that :func:`enable` installed. Returns None."""
    sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, _OnDemandInstaller)]


def main(argv=None):
    """``python -m d2lzh.install [plan|mxnet|torch|cuda11]``: print the MXNet build this
    machine gets and why (``plan``, the default), or install it (``mxnet``), PyTorch
    (``torch``) or only the CUDA 11 libraries into :func:`d2lzh._cuda11.target_dir`
    (``cuda11``). Exit status 1 with the one-line reason when something fails."""
    import argparse
    parser = argparse.ArgumentParser(prog='python -m d2lzh.install',
                                     description='Print the MXNet build this machine gets and why (plan), or '
                                     'install it (mxnet), PyTorch (torch) or the CUDA 11 libraries (cuda11).')
    parser.add_argument('what', nargs='?', default='plan',
                        choices=('plan', 'mxnet', 'torch', 'cuda11'))
    args = parser.parse_args(argv)
    try:
        if args.what == 'plan':
            try:
                gpus = query_gpus()
            except GPUQueryError as err:
                gpus = err
            plan = choose_mxnet(gpus)
            print(f'{plan.package}: {plan.reason}'
                  + (f' (+ CUDA 11 libraries into {_cuda11.target_dir()})' if plan.cuda11 else ''))
            if plan.warning:
                print(plan.warning)
        elif args.what == 'mxnet':
            ensure_mxnet()
        elif args.what == 'torch':
            ensure_torch()
        else:
            print(install_cuda11())
    except SetupError as err:
        print(f'error: {err}', file=sys.stderr)
        return 1
    return 0


if __name__ == '__main__':
    sys.exit(main())
