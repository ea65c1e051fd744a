"""The package as a whole: lazy MXNet import, the import hook of d2lzh.setup and its numpy
names (d2lzh.setup.numpy2), pinned versions, the generated setup cell."""
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _run(code):
    return subprocess.run([sys.executable, '-c', code], capture_output=True, text=True,
                          cwd=ROOT, timeout=120)


def test_import_d2lzh_does_not_import_mxnet():
    out = _run('import sys, d2lzh as d2l\n'
               'with d2l.Benchmark("x"): pass\n'
               'print("mxnet" in sys.modules)\n'
               'd2l.try_gpu\n'
               'print("mxnet" in sys.modules)')
    assert out.returncode == 0, out.stderr
    assert out.stdout.split()[-2:] == ['False', 'True']


def test_mxnet_is_prepared_at_its_import_not_at_import_d2lzh():
    """The PyTorch edition does not pay for MXNet's preparation (setuptools' distutils,
    0.1-0.3 s of a cold start) and the book's namespaces never import the installer; a later
    plain `import mxnet` is prepared by the one hook, which stays the first finder."""
    out = _run('import importlib.util, sys\n'
               'import d2lzh.data, d2lzh.setup\n'
               'if importlib.util.find_spec("torch"):\n'
               '    from d2lzh import torch as d2l\n'
               'watch = ("mxnet", "setuptools", "distutils", "d2lzh.setup.install",\n'
               '         "d2lzh.setup.cuda11", "d2lzh.setup.numpy2")\n'
               'print(sorted(m for m in watch if m in sys.modules),\n'
               '      [type(f).__name__ for f in sys.meta_path].count("_ImportHook"))\n'
               'import d2lzh as d2l\n'
               'd2l.try_gpu\n'
               'print("distutils" in sys.modules, "d2lzh.setup.install" in sys.modules,\n'
               '      sys.meta_path[0] is d2lzh.setup._hook, d2lzh.setup._hook.prepared)')
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ['[] 1', 'True False True True']


@pytest.mark.skipif(int(__import__('numpy').__version__.split('.')[0]) >= 2,
                    reason='numpy 2 has np.bool again (as np.bool_); the numpy-2 names are '
                           'checked by test_mxnet_under_numpy_2_names')
def test_mxnet_imports_after_d2lzh_without_np_bool():
    """numpy 1.24-1.26 have no np.bool; simulate that and check the shim."""
    code = '''
import numpy
original = numpy.__getattr__
def without_bool(name):
    if name == 'bool':
        raise AttributeError("module 'numpy' has no attribute 'bool'")
    return original(name)
numpy.__getattr__ = without_bool
try:
    numpy.bool
    raise SystemExit('simulation failed')
except AttributeError:
    pass
import d2lzh
import mxnet
print(mxnet.nd.array([1, 0], dtype='bool').asnumpy().tolist())
'''
    out = _run(code)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == '[True, False]'


def test_mxnet_under_numpy_2_names():
    """With whichever numpy is installed (CI runs this in the numpy-1 and numpy-2 venvs),
    MXNet's numpy front end, which re-exports the removed names, works after import d2lzh."""
    out = _run('import d2lzh, numpy\n'
               'import mxnet as mx\n'
               'from mxnet import np as mnp, npx\n'
               'print(numpy.__version__.split(".")[0], mx.numpy.utils.PZERO,\n'
               '      mx.numpy.fallback.alltrue([True, True]), mnp.array([1, 2]).sum())\n')
    assert out.returncode == 0, out.stderr
    major, pzero, alltrue, total = out.stdout.split()
    assert major == __import__('numpy').__version__.split('.')[0]
    assert (pzero, alltrue, total) == ('0.0', 'True', '3.0')


def test_restore_numpy_names_fills_what_numpy_2_removed():
    """A stand-in numpy module that lacks the removed names gets them back, correctly."""
    import math
    import types

    import numpy

    from d2lzh.setup.numpy2 import restore_numpy_names
    fake = types.ModuleType('numpy')
    for name in ('all', 'any', 'prod', 'round', 'isin', 'asarray', 'sort', 'float64',
                 'complex128'):
        setattr(fake, name, getattr(numpy, name))
    fake.trapezoid = lambda y, **kw: float(sum(y[1:]) + sum(y[:-1])) / 2
    fake.bool = numpy.bool_
    added = restore_numpy_names(fake)
    assert 'bool' not in added and fake.bool is numpy.bool_   # never replaced
    assert {'PZERO', 'NINF', 'NAN', 'alltrue', 'sometrue', 'product', 'round_', 'in1d',
            'trapz', 'msort', 'npv', 'pmt', 'float_'} <= set(added)
    assert math.copysign(1, fake.NZERO) == -1 and fake.NINF == -math.inf
    assert math.isnan(fake.NAN)
    assert fake.alltrue([True, False]) == numpy.False_ and fake.product([2, 3]) == 6
    assert fake.in1d([[1, 2], [3, 4]], [2, 3]).tolist() == [False, True, True, False]
    assert fake.msort(numpy.array([[3, 1], [1, 2]])).tolist() == [[1, 1], [3, 2]]
    assert fake.trapz([1, 2, 3]) == 4.0
    with pytest.raises(NotImplementedError, match='numpy.npv 已从 numpy 中删去.*numpy_financial'):
        fake.npv(0.1, [1, 2])
    assert restore_numpy_names(fake) == []   # idempotent


def test_restore_numpy_names_changes_nothing_numpy_has():
    import numpy

    from d2lzh.setup.numpy2 import restore_numpy_names
    before = dict(vars(numpy))
    restore_numpy_names(numpy)
    changed = [k for k, v in before.items() if vars(numpy)[k] is not v]
    assert changed == []


def test_unknown_attribute():
    import d2lzh
    with pytest.raises(AttributeError, match="'d2lzh' 没有属性 'no_such_thing'"):
        d2lzh.no_such_thing  # noqa: B018


def _pins(lines):
    pins = {}
    for line in lines:
        line = line.split('#')[0].strip().lstrip('- ').strip()
        m = re.match(r'^([A-Za-z0-9_.\-]+)==([^;\s]+)\s*(?:;\s*(.*))?$', line)
        if m:
            pins.setdefault(m.group(1).lower(), set()).add(m.group(2))
    return pins


def test_environment_yml_matches_requirements():
    req = _pins((ROOT / 'requirements.txt').read_text().splitlines())
    env_text = (ROOT / 'environment.yml').read_text()
    pip_section = env_text.split('- pip:', 1)[1].splitlines()
    env = _pins(pip_section)
    python = re.search(r'-\s*python=(3\.\d+)', env_text).group(1)
    # the environment pins one Python, so it takes the numpy pin for that Python
    assert python in ('3.10', '3.11')
    req['numpy'] = {'1.23.5'}
    assert env == req


def test_requirements_are_all_pinned():
    for name in ('requirements.txt', 'requirements-lab.txt', 'requirements-torch.txt',
                 'requirements-numpy2.txt'):
        for line in (ROOT / name).read_text().splitlines():
            line = line.split('#')[0].strip()
            if line and not line.startswith('-r'):
                assert '==' in line, f'{name}: {line!r} is not pinned'


def test_numpy2_requirements_differ_only_in_numpy_and_mxnet():
    req = _pins((ROOT / 'requirements.txt').read_text().splitlines())
    np2 = _pins((ROOT / 'requirements-numpy2.txt').read_text().splitlines())
    assert [v.split('.')[0] for v in np2.pop('numpy')] == ['2']
    assert 'mxnet' not in np2            # `python -m d2lzh.setup.install mxnet` (--no-deps)
    del req['numpy'], req['mxnet']
    assert np2 == req


def test_pyproject_is_loose_and_agrees_with_requirements():
    text = (ROOT / 'pyproject.toml').read_text()
    req = _pins((ROOT / 'requirements.txt').read_text().splitlines())
    deps = text.split('dependencies = [', 1)[1].split(']', 1)[0]
    assert 'numpy>=' in deps and '==' not in deps and 'numpy<' not in deps
    assert 'mxnet' not in deps           # an extra: the setup cell picks the build
    for build in ('mxnet', 'mxnet-cu112'):
        assert f'{build} = ["{build}=={req["mxnet"].pop() if build == "mxnet" else "1.9.1"}"]' \
            in text
    assert re.search(r'^requires-python = ">=3\.10"$', text, re.M)   # 3.13 allowed


def test_setup_cells_are_generated_and_current():
    """Every notebook of both editions starts with the one generated setup cell, which ends by
    enabling installation at import, and the cloud links are those of the one repository URL
    (scripts/make_setup_cell.py --check)."""
    import json
    sys.path.insert(0, str(ROOT / 'scripts'))
    try:
        import make_setup_cell
    finally:
        sys.path.pop(0)
    from d2lzh import project
    source = make_setup_cell.setup_cell_source()
    assert source.endswith('\nimport d2lzh.setup\nd2lzh.setup.enable()')
    owner, repo, branch = project.repository()
    assert f'https://github.com/{owner}/{repo}/archive/refs/heads/{branch}.zip' in source
    for path in project.notebooks('all'):
        nb = json.loads((ROOT / path).read_text(encoding='utf-8'))
        first = next(c for c in nb['cells'] if c['cell_type'] == 'code')
        assert ''.join(first['source']) == source, f'{path}: run scripts/make_setup_cell.py'
    out = subprocess.run([sys.executable, str(ROOT / 'scripts' / 'make_setup_cell.py'), '--check'],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr


def test_repository_url_is_written_once():
    """Only pyproject.toml names the repository; everything else is generated from it."""
    owner_repo = 'd2lzh-perf/d2lzh-perf'
    hits = []
    for path in [*ROOT.glob('*.toml'), *ROOT.glob('*.py'), *(ROOT / 'd2lzh').rglob('*.py'),
                 *(ROOT / 'scripts').glob('*.py'), ROOT / 'Makefile', ROOT / '.ci' / 'run']:
        if owner_repo in path.read_text(encoding='utf-8'):
            hits.append(path.relative_to(ROOT).as_posix())
    assert hits == ['pyproject.toml']
