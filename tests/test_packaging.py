"""The package as a whole: lazy MXNet import, the numpy shim, pinned versions."""
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


def test_mxnet_imports_after_d2lzh_without_np_bool():
    """numpy >= 1.24 has no np.bool; simulate that and check the shim."""
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


def test_numpy_2_is_refused_with_the_fix(monkeypatch):
    import numpy

    import d2lzh._compat as compat
    monkeypatch.setattr(compat, '_prepared', False)
    monkeypatch.setattr(numpy, '__version__', '2.1.0')
    with pytest.raises(ImportError, match='needs numpy < 2.*requirements.txt'):
        compat.prepare_mxnet_import()


def test_unknown_attribute():
    import d2lzh
    with pytest.raises(AttributeError, match='no attribute'):
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
    for name in ('requirements.txt', 'requirements-lab.txt', 'requirements-torch.txt'):
        for line in (ROOT / name).read_text().splitlines():
            line = line.split('#')[0].strip()
            if line and not line.startswith('-r'):
                assert '==' in line, f'{name}: {line!r} is not pinned'


def test_pyproject_pins_agree_with_requirements():
    text = (ROOT / 'pyproject.toml').read_text()
    req = _pins((ROOT / 'requirements.txt').read_text().splitlines())
    for name in ('mxnet', 'numpy'):
        for version in req[name]:
            assert f'{name}=={version}' in text
