"""Shared fixtures: tiny generated IDX data sets and an isolated data search path."""
import gzip
import hashlib
import os
import struct
from pathlib import Path

import numpy as np
import pytest

import d2lzh.data as data

DEBIAN_DIR = Path('/usr/share/datasets/fashion-mnist')


def idx_bytes(array):
    """Encode a uint8 array in the IDX format (the MNIST file format)."""
    array = np.ascontiguousarray(array, dtype=np.uint8)
    header = bytes([0, 0, 0x08, array.ndim]) + struct.pack('>' + 'I' * array.ndim, *array.shape)
    return header + array.tobytes()


@pytest.fixture
def tiny_dataset(tmp_path, monkeypatch):
    """Write a 12-train / 5-test fake Fashion-MNIST into ``tmp_path/'tiny'`` and
    point ``d2lzh.data.FILES`` at its checksums. Returns (folder, arrays)."""
    rng = np.random.default_rng(0)
    arrays = {
        'train_images': rng.integers(0, 256, (12, 28, 28), dtype=np.uint8),
        'train_labels': (np.arange(12) % 10).astype(np.uint8),
        'test_images': rng.integers(0, 256, (5, 28, 28), dtype=np.uint8),
        'test_labels': np.array([3, 1, 4, 1, 5], dtype=np.uint8),
    }
    folder = tmp_path / 'tiny'
    folder.mkdir()
    files = {}
    for key, spec in data.FILES.items():
        content = idx_bytes(arrays[key])
        (folder / (spec.name + '.gz')).write_bytes(gzip.compress(content))
        files[key] = data.FileSpec(spec.name, hashlib.sha256(content).hexdigest())
    monkeypatch.setattr(data, 'FILES', files)
    return folder, arrays


@pytest.fixture
def isolated(tmp_path, monkeypatch):
    """No data anywhere and no network: empty cache and system folders, no
    $D2LZH_DATA_DIR / $D2LZH_MAX_EXAMPLES, downloads go to a closed local port."""
    cache_home = tmp_path / 'mxnet-home'
    system = tmp_path / 'system'
    system.mkdir()
    monkeypatch.setenv('MXNET_HOME', str(cache_home))
    monkeypatch.delenv('D2LZH_DATA_DIR', raising=False)
    monkeypatch.delenv('D2LZH_MAX_EXAMPLES', raising=False)
    monkeypatch.setenv('D2LZH_DATA_URL', 'http://127.0.0.1:9/')  # discard port: refused
    monkeypatch.setattr(data, 'SYSTEM_DIR', system)
    return {'cache': cache_home / 'datasets' / 'fashion-mnist', 'system': system}


@pytest.fixture(scope='session')
def debian_dir():
    """The real data from Debian's package; required in CI, skipped elsewhere."""
    if not all((DEBIAN_DIR / (s.name + '.gz')).is_file() for s in data.FILES.values()):
        if os.environ.get('CI'):
            pytest.fail(f'{DEBIAN_DIR} is missing: .ci/run must install dataset-fashion-mnist')
        pytest.skip(f'{DEBIAN_DIR} not installed (apt-get install dataset-fashion-mnist)')
    return DEBIAN_DIR
