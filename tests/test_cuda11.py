"""Loading mxnet-cu112 on NVIDIA's pip packages of CUDA 11 (d2lzh.setup.cuda11, issue 8.4).

Two groups:

* cheap tests (every `make test`): a fake "GPU build" of MXNet (a tiny libmxnet.so built
  with gcc that needs libcuda.so.1 and libcudart.so.11.0) shows that d2lzh loads the
  libraries from the pip folder by path, and gives a clear error, not a raw OSError, when
  the driver or a library is missing;
* the real mxnet-cu112 1.9.1 with the real CUDA 11 packages, against a stub NVIDIA driver
  (tests/stub_libcuda/libcuda.c) that sees no GPU: `make test-gpu-build` (about 2.2 GB of
  downloads). These skip when the installed MXNet is not a GPU build, unless
  D2LZH_REQUIRE_GPU_BUILD=1 (set by `make test-gpu-build`) makes that a failure.
"""
import importlib.machinery
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from d2lzh.setup import cuda11

ROOT = Path(__file__).resolve().parent.parent
STUB_SOURCE = ROOT / 'tests' / 'stub_libcuda' / 'libcuda.c'
REQUIRE_GPU_BUILD = os.environ.get('D2LZH_REQUIRE_GPU_BUILD') == '1'


def _gcc(*args):
    gcc = shutil.which('gcc') or shutil.which('cc')
    if gcc is None:
        if REQUIRE_GPU_BUILD:
            pytest.fail('no C compiler (gcc) to build the stub NVIDIA driver')
        pytest.skip('no C compiler (gcc) to build the stub NVIDIA driver')
    subprocess.run([gcc, '-shared', '-fPIC', '-Wall', '-Werror', *map(str, args)],
                   check=True, capture_output=True, timeout=120)


@pytest.fixture(scope='module')
def stub_driver(tmp_path_factory):
    """Folder holding the stub libcuda.so.1 built from tests/stub_libcuda/libcuda.c."""
    folder = tmp_path_factory.mktemp('stub_driver')
    _gcc('-o', folder / 'libcuda.so.1', '-Wl,-soname,libcuda.so.1', STUB_SOURCE)
    return folder


def _run(code, *, driver=None, pythonpath=(), cuda11_dir=None, extra_env=None):
    """Run ``code`` in a fresh interpreter; ``driver`` is the folder put on
    LD_LIBRARY_PATH (None: no driver anywhere)."""
    env = {k: v for k, v in os.environ.items()
           if k not in ('LD_LIBRARY_PATH', 'D2LZH_CUDA11_DIR', 'MXNET_LIBRARY_PATH')}
    if driver is not None:
        env['LD_LIBRARY_PATH'] = str(driver)
    if cuda11_dir is not None:
        env['D2LZH_CUDA11_DIR'] = str(cuda11_dir)
    env['PYTHONPATH'] = os.pathsep.join([*map(str, pythonpath), str(ROOT)])
    env.update(extra_env or {})
    return subprocess.run([sys.executable, '-c', textwrap.dedent(code)], capture_output=True,
                          text=True, cwd=ROOT, env=env, timeout=300, check=False)


def _system_has_driver():
    import ctypes.util
    return ctypes.util.find_library('cuda') is not None


# ----------------------------------------------------------------- the contract with the installer

def test_every_library_comes_from_one_of_the_packages():
    names = {p.split('==')[0] for p in cuda11.PACKAGES}
    folders = {folder for folder, _ in cuda11.LIBRARIES}
    assert {f'nvidia-{folder.replace("_", "-")}-cu11' for folder in folders} == names
    assert all('==' in p for p in cuda11.PACKAGES), 'every package is pinned'


def test_gpu_build_is_told_by_the_distribution_name(monkeypatch):
    for dist, build in [(('mxnet-cu112', '1.9.1'), 'mxnet-cu112 1.9.1'),
                        (('mxnet', '1.9.1'), None), (None, None)]:
        monkeypatch.setattr(cuda11, 'installed_mxnet', lambda: dist)
        assert cuda11.gpu_build() == build


# ----------------------------------------------------------------- a fake GPU build (cheap)

@pytest.fixture
def fake_gpu_build(stub_driver, tmp_path):
    """(site folder with a fake ``mxnet-cu112`` whose libmxnet.so needs libcuda.so.1 and
    libcudart.so.11.0, a pip-like CUDA 11 folder with every library of the set, an empty one)."""
    cudart_src = tmp_path / 'cudart.c'
    cudart_src.write_text('int cudaGetDeviceCount(int *n) { *n = 0; return 100; }\n'
                          'const char *cudaGetErrorName(int e) { return "cudaErrorNoDevice"; }\n'
                          'const char *cudaGetErrorString(int e) { return "no device"; }\n')
    pip_dir = tmp_path / 'cuda11'
    for folder, name in cuda11.LIBRARIES:   # libcudart answers; the others are empty
        lib = pip_dir / 'nvidia' / folder / 'lib' / name
        lib.parent.mkdir(parents=True, exist_ok=True)
        _gcc('-o', lib, f'-Wl,-soname,{name}', *(
            [cudart_src] if name == 'libcudart.so.11.0' else ['-x', 'c', os.devnull]))
    cudart = pip_dir / 'nvidia' / 'cuda_runtime' / 'lib' / 'libcudart.so.11.0'
    site = tmp_path / 'site'
    (site / 'mxnet').mkdir(parents=True)
    (site / 'mxnet_cu112-1.9.1.dist-info').mkdir()
    (site / 'mxnet_cu112-1.9.1.dist-info' / 'METADATA').write_text(
        'Metadata-Version: 2.1\nName: mxnet-cu112\nVersion: 1.9.1\n')
    mx_src = tmp_path / 'mxnet.c'
    mx_src.write_text('int cuInit(unsigned int);\nint cudaGetDeviceCount(int *);\n'
                      'int MXGetGPUCount(int *n) { cuInit(0); return cudaGetDeviceCount(n); }\n')
    _gcc('-o', site / 'mxnet' / 'libmxnet.so', mx_src, '-Wl,--no-as-needed',
         f'-L{stub_driver}', '-l:libcuda.so.1', f'-L{cudart.parent}', '-l:libcudart.so.11.0')
    (site / 'mxnet' / '__init__.py').write_text(
        'import ctypes, os\n'
        "_LIB = ctypes.CDLL(os.path.join(os.path.dirname(__file__), 'libmxnet.so'))\n"
        "__version__ = '0.0-fake-gpu-build'\n")
    empty = tmp_path / 'empty'
    empty.mkdir()
    return site, pip_dir, empty


def test_fake_gpu_build_loads_cudart_from_the_pip_folder(fake_gpu_build, stub_driver):
    site, pip_dir, _ = fake_gpu_build
    code = '''
        import os, d2lzh, mxnet
        maps = open('/proc/self/maps').read()
        print([line.split()[-1] for line in maps.splitlines() if 'libcudart' in line][0])
        print(os.environ.get('MXNET_CUDNN_LIB_CHECKING'), os.environ.get('MXNET_CUDA_LIB_CHECKING'))
    '''
    out = _run(code, driver=stub_driver, pythonpath=[site], cuda11_dir=pip_dir)
    assert out.returncode == 0, out.stderr
    cudart, checking = out.stdout.strip().splitlines()
    assert cudart == str(pip_dir / 'nvidia/cuda_runtime/lib/libcudart.so.11.0')
    # pip's cuDNN 8.9 / cudart 11.8 differ on purpose from the 8.x / 11.2 MXNet was built
    # with: MXNet's start-up mismatch warnings are off, unless the user set them.
    assert checking == '0 0'
    out = _run(code, driver=stub_driver, pythonpath=[site], cuda11_dir=pip_dir,
               extra_env={'MXNET_CUDNN_LIB_CHECKING': '1'})
    assert out.returncode == 0 and out.stdout.strip().splitlines()[1] == '1 0', out.stderr
    # MXNet installed after `import d2lzh` (as a notebook's setup cell does): same result.
    late = f'''
        import importlib, sys
        class NoMXNet:                             # hides any MXNet installed here
            @staticmethod
            def find_spec(name, path=None, target=None):
                if name == 'mxnet':
                    raise ModuleNotFoundError("No module named 'mxnet'")
        sys.meta_path.insert(0, NoMXNet)
        import d2lzh
        sys.meta_path.remove(NoMXNet)              # "pip install mxnet-cu112" happens here
        sys.path.insert(0, {str(site)!r})
        importlib.invalidate_caches()
        import mxnet
        maps = open('/proc/self/maps').read()
        print([line.split()[-1] for line in maps.splitlines() if 'libcudart' in line][0])
    '''
    out = _run(late, driver=stub_driver, cuda11_dir=pip_dir)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == cudart
    # Without d2lzh, the loader does not look in the pip folder: the preload is what works.
    plain = _run('import mxnet', driver=stub_driver, pythonpath=[site], cuda11_dir=pip_dir)
    assert plain.returncode != 0 and 'libcudart.so.11.0' in plain.stderr


def test_fake_gpu_build_that_sees_no_gpu_says_why(fake_gpu_build, stub_driver):
    site, cuda11_dir, _ = fake_gpu_build
    code = 'import d2lzh, mxnet\nfrom d2lzh.setup import cuda11\nprint(cuda11.no_gpu_warning())'
    out = _run(code, driver=stub_driver, pythonpath=[site], cuda11_dir=cuda11_dir)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == (
        'mxnet-cu112 1.9.1 是 MXNet 的 GPU 版，却找不到 GPU（cudaErrorNoDevice: no device）。'
        '改用 CPU。在云端笔记本上，把运行时换成带 GPU 的；在没有 NVIDIA GPU 的机器上，'
        '应安装 CPU 版 `mxnet`。')
    out = _run('from d2lzh.setup import cuda11\nprint(cuda11.no_gpu_warning())')
    assert out.stdout.strip() == 'None'                 # nothing loaded: not a GPU build


@pytest.mark.skipif(_system_has_driver(), reason='this machine has an NVIDIA driver')
def test_fake_gpu_build_without_driver_says_why(fake_gpu_build):
    site, pip_dir, _ = fake_gpu_build
    code = '''
        try:
            import d2lzh        # may keep the error for later: d2lzh works without MXNet
            import mxnet
        except ImportError as err:
            print(type(err).__name__)
            print(err)
    '''
    out = _run(code, driver=None, pythonpath=[site], cuda11_dir=pip_dir)
    assert out.returncode == 0, out.stderr
    kind, message = out.stdout.split('\n', 1)
    assert kind == 'CudaSetupError'
    assert 'NVIDIA 驱动（libcuda.so.1）' in message
    assert '把运行时换成带 GPU 的' in message and 'mxnet==1.9.1' in message
    # Through d2lzh's own API, too.
    out = _run('import d2lzh as d2l\nd2l.try_gpu()', driver=None, pythonpath=[site],
               cuda11_dir=pip_dir)
    assert out.returncode != 0
    assert 'CudaSetupError' in out.stderr and 'NVIDIA 驱动' in out.stderr
    assert 'OSError' not in out.stderr


def test_fake_gpu_build_missing_library_names_it_and_the_fix_then_retry_works(
        fake_gpu_build, stub_driver):
    site, pip_dir, empty = fake_gpu_build
    code = f'''
        import shutil
        try:
            import d2lzh
            import mxnet
            raise SystemExit('mxnet imported without libcudart')
        except ImportError as err:
            print(type(err).__name__, err)
        # The fix: install the library where d2lzh looks, then import again.
        shutil.copytree({str(pip_dir / 'nvidia')!r}, {str(empty / 'nvidia')!r})
        import mxnet
        print('imported', mxnet.__version__)
    '''
    out = _run(code, driver=stub_driver, pythonpath=[site], cuda11_dir=empty)
    assert out.returncode == 0, out.stderr
    first, second = out.stdout.strip().splitlines()
    assert first.startswith('CudaSetupError')
    assert 'libcudart.so.11.0' in first and f'既不在 {empty}' in first
    assert '-m d2lzh.setup.install cuda11' in first
    assert all(name in first for _, name in cuda11.LIBRARIES), 'every missing library is named'
    assert second == 'imported 0.0-fake-gpu-build'


def test_cpu_build_loads_nothing():
    if cuda11.installed_mxnet() is None or cuda11.gpu_build():
        pytest.skip('needs the CPU build of MXNet')
    out = _run('import d2lzh, mxnet\nprint("libcuda" in open("/proc/self/maps").read())')
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == 'False'


# ----------------------------------------------------------------- the real mxnet-cu112

def _require_gpu_build():
    """The path of the GPU build's libmxnet.so (skip or fail without one)."""
    if cuda11.gpu_build():
        spec = importlib.machinery.PathFinder.find_spec('mxnet')
        return Path(spec.submodule_search_locations[0]) / 'libmxnet.so'
    if REQUIRE_GPU_BUILD:
        pytest.fail(f'D2LZH_REQUIRE_GPU_BUILD=1 but the MXNet here '
                    f'({cuda11.installed_mxnet()}) is not a GPU build')
    pytest.skip('mxnet-cu112 is not installed (`make test-gpu-build`)')


def test_mxnet_cu112_needs_only_what_the_packages_and_the_driver_provide():
    lib = _require_gpu_build()
    out = subprocess.run(['readelf', '-d', lib], capture_output=True, text=True, check=True)
    needed = {line.split('[')[1].split(']')[0] for line in out.stdout.splitlines()
              if '(NEEDED)' in line}
    cuda = {name for name in needed if name.startswith(('libcu', 'libnv', 'libnccl'))}
    provided = {name for _, name in cuda11.LIBRARIES} | {cuda11.DRIVER}
    assert cuda - provided == set()
    for folder, name in cuda11.LIBRARIES:
        assert (cuda11.target_dir() / 'nvidia' / folder / 'lib' / name).is_file(), name


def test_mxnet_cu112_loads_and_try_gpu_falls_back_to_the_cpu(stub_driver):
    _require_gpu_build()
    code = '''
        import warnings
        warnings.simplefilter('always')
        import d2lzh as d2l
        from mxnet import nd, runtime
        import mxnet as mx
        print('CUDA build:', runtime.Features().is_enabled('CUDA'))
        print('num_gpus:', mx.context.num_gpus())
        print('try_gpu:', d2l.try_gpu())
        print('sum:', nd.ones((3, 4), ctx=d2l.try_gpu()).sum().asscalar())
        maps = open('/proc/self/maps').read()
        print('cudart:', [l.split()[-1] for l in maps.splitlines() if 'libcudart' in l][0])
    '''
    out = _run(code, driver=stub_driver)
    assert out.returncode == 0, out.stderr
    lines = dict(line.split(': ', 1) for line in out.stdout.strip().splitlines())
    assert lines['CUDA build'] == 'True'
    assert lines['num_gpus'] == '0'
    assert lines['try_gpu'] == 'cpu(0)'
    assert lines['sum'] == '12.0'
    assert lines['cudart'].startswith(str(cuda11.target_dir()))
    assert out.stderr.count('却找不到 GPU') == 1, out.stderr
    assert 'cudaErrorNoDevice' in out.stderr and '改用 CPU' in out.stderr


def test_mxnet_cu112_libraries_load_their_own_parts_from_the_pip_folder(stub_driver):
    """cuDNN 8 loads its six sub-libraries, and NVRTC (MXNet's runtime kernel compiler) its
    builtins, lazily by name: they must come from the same pip folder. Neither needs a GPU."""
    _require_gpu_build()
    code = r'''
        import ctypes, d2lzh, mxnet
        cudnn = ctypes.CDLL('libcudnn.so.8')      # the copy preload() loaded
        for part in ('OpsInfer', 'OpsTrain', 'CnnInfer', 'CnnTrain', 'AdvInfer', 'AdvTrain'):
            assert getattr(cudnn, f'cudnn{part}VersionCheck')() == 0, part
        nvrtc = ctypes.CDLL('libnvrtc.so.11.2')
        prog = ctypes.c_void_p()
        src = b'extern "C" __global__ void twice(float *x) { x[threadIdx.x] *= 2.0f; }'
        assert nvrtc.nvrtcCreateProgram(ctypes.byref(prog), src, b'k.cu', 0, None, None) == 0
        opts = (ctypes.c_char_p * 1)(b'--gpu-architecture=compute_75')
        assert nvrtc.nvrtcCompileProgram(prog, 1, opts) == 0
        for line in open('/proc/self/maps'):
            if 'libcudnn' in line or 'libnvrtc' in line:
                print(line.split()[-1])
    '''
    out = _run(code, driver=stub_driver)
    assert out.returncode == 0, out.stderr
    paths = set(out.stdout.split())
    names = {Path(p).name for p in paths}
    assert {f'libcudnn_{a}_{b}.so.8' for a in ('ops', 'cnn', 'adv')
            for b in ('infer', 'train')} < names
    assert any(n.startswith('libnvrtc-builtins') for n in names)
    assert all(p.startswith(str(cuda11.target_dir())) for p in paths), paths


def test_mxnet_cu112_with_a_driver_too_old_for_cuda_11_says_update_it(stub_driver):
    _require_gpu_build()
    out = _run('import d2lzh as d2l\nprint(d2l.try_gpu())', driver=stub_driver,
               extra_env={'STUB_LIBCUDA_VERSION': '10020'})   # a CUDA 10.2 driver
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == 'cpu(0)'
    assert 'cudaErrorInsufficientDriver' in out.stderr
    assert '请更新 NVIDIA 驱动' in out.stderr


def test_mxnet_cu112_without_d2lzh_does_not_load():
    """The reason for the preload: the loader alone does not find pip's CUDA 11."""
    _require_gpu_build()
    out = _run('import mxnet', driver=None)
    assert out.returncode != 0 and 'cannot open shared object file' in out.stderr


@pytest.mark.skipif(_system_has_driver(), reason='this machine has an NVIDIA driver')
def test_mxnet_cu112_without_driver_gives_the_cause_and_the_fix():
    _require_gpu_build()
    for code in ('import d2lzh as d2l\nd2l.try_gpu()', 'import d2lzh\nimport mxnet'):
        out = _run(code, driver=None)
        assert out.returncode != 0
        last = out.stderr.strip().splitlines()[-1]
        assert last.startswith(
            'd2lzh.setup.cuda11.CudaSetupError: mxnet-cu112 1.9.1 是 MXNet 的 GPU 版')
        assert 'NVIDIA 驱动（libcuda.so.1）' in last and 'OSError' not in out.stderr
