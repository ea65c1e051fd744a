"""The NVIDIA GPUs of this machine: d2lzh's one ``nvidia-smi`` query (beyond the book),
from which the installer chooses the MXNet build and the MXNet edition names GPUs
(``gpu_name``); how many the edition in use can use, as its face registers it."""
import re
import shutil
import subprocess
from collections import namedtuple

GPU = namedtuple('GPU', 'name compute_capability')
GPU.__doc__ = """One NVIDIA GPU: its name (str, e.g. 'Tesla T4') and compute capability as
(major, minor), e.g. (7, 5), or None when ``nvidia-smi`` cannot tell it."""


class GPUQueryError(RuntimeError):
    """``nvidia-smi`` exists but did not answer (e.g. a GPU runtime without a working driver)."""


def query_gpus(timeout=30):
    """The NVIDIA GPUs of this machine, in ``nvidia-smi``'s order (index i is ``gpu(i)``): a
    list of :class:`GPU`, empty without ``nvidia-smi``; a capability that is not a number
    (``[N/A]``; drivers older than 510) is None. :class:`GPUQueryError`: ``nvidia-smi`` failed
    or took over ``timeout`` seconds (driver missing or not loaded), with its first line."""
    exe = shutil.which('nvidia-smi')
    if exe is None:
        return []

    def ask(fields):
        return subprocess.run([exe, f'--query-gpu={fields}', '--format=csv,noheader'],
                              capture_output=True, text=True, timeout=timeout)
    try:
        out = ask('name,compute_cap')
        lines = [line.strip() for line in (out.stdout + out.stderr).splitlines() if line.strip()]
        if any('not a valid field' in line.lower() for line in lines):
            # drivers older than 510 do not know compute_cap: ask for the names alone
            return [GPU(n.strip(), None) for n in ask('name').stdout.splitlines() if n.strip()]
    except (OSError, subprocess.TimeoutExpired) as err:
        raise GPUQueryError(f'nvidia-smi 没有应答：{err}') from None
    if out.returncode != 0:
        raise GPUQueryError(lines[0] if lines else f'nvidia-smi 的退出码是 {out.returncode}')
    gpus = []
    for line in filter(str.strip, out.stdout.splitlines()):
        name, _, cap = line.rpartition(',')
        m = re.fullmatch(r'\s*(\d+)\.(\d+)\s*', cap) if name else None
        gpus.append(GPU((name or line).strip(), (int(m[1]), int(m[2])) if m else None))
    return gpus


_EDITIONS = {}  # edition -> how many GPUs it can use (a function), in order of import


def register_edition(name, count_gpus):
    """Called by each face on import: ``count_gpus()`` is how many GPUs edition ``name``
    can use (int), or None while it is not in use. Returns None."""
    _EDITIONS[name] = count_gpus


def gpus_in_use():
    """How many GPUs the d2lzh edition the notebook imported can use (int), or None when it
    imported none (for :func:`d2lzh.data.choose_max_examples` and
    :func:`d2lzh.results.record`). The face registered last answers first: PyTorch's
    imports MXNet's before it."""
    for count in reversed(list(_EDITIONS.values())):
        if (n := count()) is not None:
            return int(n)
    return None
