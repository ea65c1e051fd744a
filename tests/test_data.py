"""d2lzh.data: discovery order, verification, download, parsing, subsets."""
import gzip
import json
import http.server
import os
import shutil
import threading
import warnings
from pathlib import Path

import numpy as np
import pytest

import d2lzh.data as data
from d2lzh import results
from conftest import idx_bytes


# ------------------------------------------------------------------ IDX format

def test_read_idx_round_trip():
    images = np.arange(2 * 3 * 4, dtype=np.uint8).reshape(2, 3, 4)
    np.testing.assert_array_equal(data.read_idx(idx_bytes(images)), images)
    labels = np.array([9, 0, 7], dtype=np.uint8)
    np.testing.assert_array_equal(data.read_idx(idx_bytes(labels)), labels)


@pytest.mark.parametrize('content, message', [
    (b'\x01\x00\x08\x01\x00\x00\x00\x01\x05', '魔数不对'),
    (b'\x00\x00\x0d\x01\x00\x00\x00\x01\x05', '类型码 0x0d'),
    (b'\x00\x00\x08\x03\x00\x00', '文件头不完整'),
    (idx_bytes(np.zeros((4, 2), np.uint8))[:-1], '文件却有 19 字节'),
])
def test_read_idx_rejects_malformed(content, message):
    with pytest.raises(data.CorruptDataError, match=message):
        data.read_idx(content)


# --------------------------------------------------------------- subset sizes

@pytest.mark.parametrize('value, expected', [
    (None, None), ('all', None), ('ALL', None), ('', None), (5, 5), ('600', 600),
    (np.int64(7), 7)])
def test_parse_max_examples_accepts(value, expected):
    assert data.parse_max_examples(value) == expected


@pytest.mark.parametrize('value', [0, -3, 2.5, '1e3', 'ten', True, '0', '-5', [3]])
def test_parse_max_examples_rejects(value):
    with pytest.raises(ValueError, match="正整数.*'all'"):
        data.parse_max_examples(value)


def test_invalid_env_max_examples_names_the_variable(isolated, tiny_dataset, monkeypatch):
    monkeypatch.setenv('D2LZH_MAX_EXAMPLES', 'lots')
    with pytest.raises(ValueError, match="D2LZH_MAX_EXAMPLES='lots' 无效"):
        data.load_fashion_mnist(tiny_dataset[0])


def test_max_examples_takes_first_n_of_each_split(isolated, tiny_dataset, monkeypatch):
    folder, arrays = tiny_dataset
    monkeypatch.setenv('D2LZH_MAX_EXAMPLES', '4')
    xtr, ytr, xte, yte = data.load_fashion_mnist(folder)
    np.testing.assert_array_equal(xtr, arrays['train_images'][:4])
    np.testing.assert_array_equal(yte, arrays['test_labels'][:4])
    # an explicit argument wins over the variable; 'all' means everything
    assert len(data.load_fashion_mnist(folder, max_examples='all')[0]) == 12
    assert len(data.load_fashion_mnist(folder, max_examples=100)[2]) == 5


# ------------------------------------------------------------------ discovery

def _copy(src, dst):
    shutil.copytree(src, dst)
    return dst


def test_search_order_root_env_cache_system(isolated, tiny_dataset, tmp_path, monkeypatch):
    folder = tiny_dataset[0]
    env_dir = _copy(folder, tmp_path / 'env')
    _copy(folder, isolated['cache'])
    for f in folder.iterdir():
        shutil.copy(f, isolated['system'])
    root = _copy(folder, tmp_path / 'root')
    monkeypatch.setenv('D2LZH_DATA_DIR', str(env_dir))
    assert data.find_fashion_mnist(root) == root
    assert data.find_fashion_mnist() == env_dir
    monkeypatch.delenv('D2LZH_DATA_DIR')
    assert data.find_fashion_mnist() == isolated['cache']
    shutil.rmtree(isolated['cache'])
    assert data.find_fashion_mnist() == isolated['system']


def test_incomplete_folder_is_skipped(isolated, tiny_dataset, tmp_path):
    partial = _copy(tiny_dataset[0], tmp_path / 'partial')
    (partial / 't10k-labels-idx1-ubyte.gz').unlink()
    for f in tiny_dataset[0].iterdir():
        shutil.copy(f, isolated['system'])
    with pytest.warns(data.DataDirWarning, match='4 个文件中缺了 1 个'):
        assert data.find_fashion_mnist(partial) == isolated['system']


def test_decompressed_files_are_accepted(isolated, tiny_dataset, tmp_path):
    raw = tmp_path / 'raw'
    raw.mkdir()
    for f in tiny_dataset[0].iterdir():
        (raw / f.name[:-3]).write_bytes(gzip.decompress(f.read_bytes()))
    xtr, ytr, _, _ = data.load_fashion_mnist(raw)
    np.testing.assert_array_equal(ytr, tiny_dataset[1]['train_labels'])
    assert ytr.dtype == np.int32 and xtr.dtype == np.uint8


def test_no_data_no_network_lists_every_place(isolated, tmp_path, monkeypatch):
    monkeypatch.setenv('D2LZH_DATA_DIR', str(tmp_path / 'from-env'))
    with pytest.raises(data.FashionMNISTNotFoundError) as info, \
            pytest.warns(data.DataDirWarning, match='不能用：它不存在') as caught:
        data.load_fashion_mnist(tmp_path / 'given-root')
    assert [str(w.message).split(' 不能用')[0] for w in caught] == [
        f'root={tmp_path / "given-root"}', f'D2LZH_DATA_DIR={tmp_path / "from-env"}']
    message = str(info.value)
    for place in (tmp_path / 'given-root', tmp_path / 'from-env', isolated['cache'],
                  isolated['system']):
        assert str(place) in message
    assert '下载失败' in message
    assert 'apt-get install dataset-fashion-mnist' in message
    assert 'D2LZH_DATA_DIR' in message
    assert not any((tmp_path / 'given-root').glob('*'))  # no partial file left


def test_download_false_raises_without_network(isolated):
    with pytest.raises(data.FashionMNISTNotFoundError, match='download=False'):
        data.find_fashion_mnist(download=False)


def test_decompressed_copy_is_written_then_read(isolated, tiny_dataset):
    folder, arrays = tiny_dataset
    data.load_fashion_mnist(folder)
    assert sorted(p.name for p in folder.iterdir()) == sorted(  # no temporary file left
        name for s in data.FILES.values() for name in (s.name, s.name + '.gz'))
    for spec in data.FILES.values():  # as readable as the .gz (not a temp file's 0600)
        assert (folder / spec.name).stat().st_mode == (folder / (spec.name + '.gz')).stat().st_mode
    for spec in data.FILES.values():  # the copies are what the next load reads
        (folder / (spec.name + '.gz')).write_bytes(b'not gzip')
    xtr, ytr, xte, yte = data.load_fashion_mnist(folder)
    np.testing.assert_array_equal(xtr, arrays['train_images'])
    np.testing.assert_array_equal(yte, arrays['test_labels'])


def test_corrupt_decompressed_copy_is_not_used_and_is_replaced(isolated, tiny_dataset):
    folder, arrays = tiny_dataset
    data.load_fashion_mnist(folder)
    plain = folder / 'train-labels-idx1-ubyte'
    good = plain.read_bytes()
    bad = bytearray(good)
    bad[-1] ^= 0xFF
    plain.write_bytes(bytes(bad))
    with pytest.warns(data.DataDirWarning, match='中的 train-labels-idx1-ubyte 没有通过'
                      '校验.*改读 train-labels-idx1-ubyte.gz'):
        _, ytr, _, _ = data.load_fashion_mnist(folder)
    np.testing.assert_array_equal(ytr, arrays['train_labels'])
    assert plain.read_bytes() == good  # replaced by a verified copy


def test_no_decompressed_copy_when_switched_off(isolated, tiny_dataset, monkeypatch):
    folder, arrays = tiny_dataset
    monkeypatch.setenv('D2LZH_DATA_COPY', '0')
    _, ytr, _, _ = data.load_fashion_mnist(folder)
    np.testing.assert_array_equal(ytr, arrays['train_labels'])
    assert all(p.suffix == '.gz' for p in folder.iterdir())


def test_no_decompressed_copy_in_the_system_folder_or_when_writing_fails(
        isolated, tiny_dataset, tmp_path, monkeypatch):
    for f in tiny_dataset[0].iterdir():
        shutil.copy(f, isolated['system'])
    data.load_fashion_mnist()
    assert all(p.suffix == '.gz' for p in isolated['system'].iterdir())

    def fail(*args):
        raise OSError(28, 'No space left on device')
    monkeypatch.setattr(data.os, 'replace', fail)
    folder = _copy(tiny_dataset[0], tmp_path / 'full-disk')
    _, ytr, _, _ = data.load_fashion_mnist(folder)
    np.testing.assert_array_equal(ytr, tiny_dataset[1]['train_labels'])
    assert all(p.suffix == '.gz' for p in folder.iterdir())  # the temporary files removed


# ----------------------------------------------------------- corrupt files

def test_truncated_gz_is_rejected_and_named(isolated, tiny_dataset):
    folder = tiny_dataset[0]
    path = folder / 'train-images-idx3-ubyte.gz'
    path.write_bytes(path.read_bytes()[:200])
    with pytest.raises(data.CorruptDataError, match='train-images-idx3-ubyte.gz'):
        data.load_fashion_mnist(folder)


def test_a_file_that_is_not_gzip_is_called_so(isolated, tiny_dataset):
    folder = tiny_dataset[0]
    (folder / 'train-labels-idx1-ubyte.gz').write_bytes(b'<html>not found</html>')
    with pytest.raises(data.CorruptDataError, match='train-labels-idx1-ubyte.gz 不是 gzip '
                       '文件') as err:
        data.load_fashion_mnist(folder)
    assert '截断' not in str(err.value)


def test_wrong_file_is_rejected_by_checksum(isolated, tiny_dataset):
    folder = tiny_dataset[0]
    shutil.copy(folder / 't10k-labels-idx1-ubyte.gz', folder / 'train-labels-idx1-ubyte.gz')
    with pytest.raises(data.CorruptDataError, match='train-labels-idx1-ubyte.gz.*SHA-256'):
        data.load_fashion_mnist(folder)


def test_corrupt_byte_is_rejected(isolated, tiny_dataset):
    folder = tiny_dataset[0]
    path = folder / 't10k-images-idx3-ubyte.gz'
    content = bytearray(gzip.decompress(path.read_bytes()))
    content[100] ^= 0xFF
    path.write_bytes(gzip.compress(bytes(content)))
    with pytest.raises(data.CorruptDataError, match='t10k-images'):
        data.load_fashion_mnist(folder)


# ------------------------------------------------------------------- download

class _Server:
    """Serve a folder on 127.0.0.1; ``truncate`` names files cut short mid-body."""

    def __init__(self, folder, truncate=()):
        folder, truncate = str(folder), set(truncate)
        self.requests = []
        requests = self.requests

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                name = self.path.lstrip('/')
                requests.append(name)
                path = os.path.join(folder, name)
                if not os.path.isfile(path):
                    self.send_error(404)
                    return
                body = open(path, 'rb').read()
                self.send_response(200)
                self.send_header('Content-Length', str(len(body)))
                self.end_headers()
                self.wfile.write(body[:len(body) // 2] if name in truncate else body)

            def log_message(self, *args):
                pass

        self.httpd = http.server.HTTPServer(('127.0.0.1', 0), Handler)
        self.url = f'http://127.0.0.1:{self.httpd.server_port}/'
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


def test_download_verifies_and_renames(isolated, tiny_dataset, monkeypatch):
    server = _Server(tiny_dataset[0])
    monkeypatch.setenv('D2LZH_DATA_URL', server.url)
    try:
        xtr, ytr, xte, yte = data.load_fashion_mnist(progress=False)
    finally:
        server.close()
    np.testing.assert_array_equal(xte, tiny_dataset[1]['test_images'])
    assert sorted(p.name for p in isolated['cache'].iterdir()) == sorted(
        name for s in data.FILES.values() for name in (s.name, s.name + '.gz'))


def test_interrupted_download_leaves_no_partial_file(isolated, tiny_dataset, monkeypatch):
    server = _Server(tiny_dataset[0], truncate={'t10k-images-idx3-ubyte.gz'})
    monkeypatch.setenv('D2LZH_DATA_URL', server.url)
    try:
        with pytest.raises(data.FashionMNISTNotFoundError, match='下载失败'):
            data.load_fashion_mnist(progress=False)
    finally:
        server.close()
    names = sorted(p.name for p in isolated['cache'].iterdir())
    assert 't10k-images-idx3-ubyte.gz' not in names
    assert not [n for n in names if n.endswith('.part')]
    # the files that did verify were kept
    assert 'train-images-idx3-ubyte.gz' in names


def test_download_never_replaces_a_present_file(isolated, tiny_dataset, tmp_path, monkeypatch):
    good = isolated['cache']
    good.mkdir(parents=True)
    shutil.copy(tiny_dataset[0] / 'train-images-idx3-ubyte.gz', good)
    before = (good / 'train-images-idx3-ubyte.gz').read_bytes()
    bad = tmp_path / 'bad-mirror'
    _copy(tiny_dataset[0], bad)
    (bad / 'train-images-idx3-ubyte.gz').write_bytes(b'garbage')
    server = _Server(bad)
    monkeypatch.setenv('D2LZH_DATA_URL', server.url)
    try:
        data.load_fashion_mnist(progress=False)
    finally:
        server.close()
    assert 'train-images-idx3-ubyte.gz' not in server.requests
    assert (good / 'train-images-idx3-ubyte.gz').read_bytes() == before


def test_bad_download_is_rejected(isolated, tiny_dataset, tmp_path, monkeypatch):
    bad = _copy(tiny_dataset[0], tmp_path / 'bad-mirror')
    (bad / 'train-labels-idx1-ubyte.gz').write_bytes(gzip.compress(b'not idx'))
    server = _Server(bad)
    monkeypatch.setenv('D2LZH_DATA_URL', server.url)
    try:
        with pytest.raises(data.FashionMNISTNotFoundError, match='train-labels-idx1-ubyte'):
            data.load_fashion_mnist(progress=False)
    finally:
        server.close()
    assert not (isolated['cache'] / 'train-labels-idx1-ubyte.gz').exists()


# ------------------------------------------------------------------ real data

def test_real_data_from_debian_package(debian_dir, isolated, monkeypatch):
    monkeypatch.setattr(data, 'SYSTEM_DIR', debian_dir)
    listing = {p.name: p.stat().st_mtime for p in debian_dir.iterdir()}
    xtr, ytr, xte, yte = data.load_fashion_mnist(max_examples='all')
    assert xtr.shape == (60000, 28, 28) and xte.shape == (10000, 28, 28)
    assert xtr.dtype == np.uint8 and ytr.dtype == np.int32
    assert np.bincount(ytr).tolist() == [6000] * 10
    assert np.bincount(yte).tolist() == [1000] * 10
    assert data.get_fashion_mnist_labels(ytr[:2]) == ['ankle boot', 't-shirt']
    # read-only use: nothing was written there, and no download was needed
    assert {p.name: p.stat().st_mtime for p in debian_dir.iterdir()} == listing
    assert not isolated['cache'].exists()


# ----------------------------------------------- a folder the user named but cannot be used

def test_named_folder_that_cannot_be_used_is_reported_before_the_fallback(
        isolated, tiny_dataset, tmp_path, monkeypatch):
    for f in tiny_dataset[0].iterdir():
        shutil.copy(f, isolated['system'])
    partial = _copy(tiny_dataset[0], tmp_path / 'partial')
    (partial / 't10k-labels-idx1-ubyte.gz').unlink()
    monkeypatch.setenv('D2LZH_DATA_DIR', str(partial))
    with pytest.warns(data.DataDirWarning) as caught:
        assert data.find_fashion_mnist() == isolated['system']
    message = str(caught[0].message)
    assert message.startswith(f'D2LZH_DATA_DIR={partial} 不能用：4 个文件中缺了 1 个：'
                              't10k-labels-idx1-ubyte.gz'), message
    assert str(isolated['system']) in message.split('接着在这些位置找：')[1]
    # the warning comes first: raised as an error, it stops the search before the fallback
    with warnings.catch_warnings():
        warnings.simplefilter('error', data.DataDirWarning)
        with pytest.raises(data.DataDirWarning):
            data.find_fashion_mnist()
    monkeypatch.delenv('D2LZH_DATA_DIR')
    with pytest.warns(data.DataDirWarning, match=r'root=\S*nope 不能用：它不存在'):
        assert data.find_fashion_mnist(tmp_path / 'nope') == isolated['system']


def test_named_folder_that_cannot_be_written_is_reported_before_downloading_elsewhere(
        isolated, tiny_dataset, tmp_path, monkeypatch):
    (tmp_path / 'a-file').write_text('')
    monkeypatch.setenv('D2LZH_DATA_DIR', str(tmp_path / 'a-file' / 'data'))
    server = _Server(tiny_dataset[0])
    monkeypatch.setenv('D2LZH_DATA_URL', server.url)
    try:
        with pytest.warns(data.DataDirWarning) as caught:
            assert data.find_fashion_mnist(progress=False) == isolated['cache']
    finally:
        server.close()
    messages = [str(w.message) for w in caught]
    assert '不能用：它不存在' in messages[0]
    assert '不能用：下载到这里失败' in messages[1]
    assert f'改为下载到 {isolated["cache"]}' in messages[1]


def test_figures_carry_the_subset_that_choose_max_examples_picked(tmp_path, monkeypatch, capsys):
    """make run's summary labels figures trained on a CPU subset (d2lzh.results)."""
    from d2lzh import results
    monkeypatch.setattr(data, 'CONTEXT', {})
    monkeypatch.delenv('D2LZH_MAX_EXAMPLES', raising=False)
    out = tmp_path / 'figures.jsonl'
    monkeypatch.setenv('D2LZH_RESULTS', str(out))
    assert data.choose_max_examples(cpu_default=300, gpu_available=False) == 300
    assert '前 300/60000 张训练图像' in capsys.readouterr().out
    results.record('test_acc', 0.1)
    results.record('one_batch_ratio', 1.5, 'x', kind='ratio', subset=None)  # no training subset
    assert data.choose_max_examples(cpu_default=300, gpu_available=True) is None
    results.record('test_acc_full', 0.9, note='book settings')
    assert data.choose_max_examples(cpu_default=None, gpu_available=False) is None  # all, on a CPU
    assert '按书中设置：使用全部 60000 张训练图像' in capsys.readouterr().out
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parent.parent / 'scripts'))
    from run_notebooks import read_figures  # make run's reader of what record wrote
    figures = read_figures(out)
    assert figures['test_acc']['subset'] == 300 and figures['test_acc']['value'] == 0.1
    assert figures['one_batch_ratio']['subset'] is None
    assert figures['test_acc_full']['subset'] is None
    assert figures['test_acc_full']['note'] == 'book settings'
    with pytest.raises(ValueError, match='note=3 无效：请用字符串或 None'):
        results.record('x', 1, note=3)


def test_load_reference_from_the_checkout_then_the_repository(tmp_path, monkeypatch, capsys):
    """A notebook's stored benchmark JSON: from the checkout; opened alone (no
    such file), downloaded (here from 127.0.0.1); if that fails, None and one
    line, and nothing is written."""
    from d2lzh import project, results
    name = 'bench/results/NVIDIA-H200-x2-2026-11-22.json'
    here = results.load_reference(name)
    with open(os.path.join(os.path.dirname(__file__), '..', *name.split('/'))) as f:
        assert here == json.load(f)
    monkeypatch.delenv(results.REFERENCE_URL_ENV, raising=False)
    owner, repo, branch = project.repository()
    assert project.url('a/b.json') == \
        f'https://raw.githubusercontent.com/{owner}/{repo}/{branch}/a/b.json'
    served = tmp_path / 'served'
    (served / 'bench').mkdir(parents=True)
    (served / 'bench' / 'ref.json').write_text('{"device": "test"}')
    (served / 'bench' / 'bad.json').write_text('{"device": ')
    server = _Server(served)
    monkeypatch.setenv(results.REFERENCE_URL_ENV, server.url)
    try:
        assert results.load_reference('bench/ref.json') == {'device': 'test'}
        assert results.load_reference('bench/bad.json') is None
        assert '这里没有 bench/bad.json' in capsys.readouterr().out
        assert results.load_reference('bench/missing.json') is None
        assert 'HTTP Error 404' in capsys.readouterr().out
    finally:
        server.close()
    assert sorted(p.name for p in (served / 'bench').iterdir()) == ['bad.json', 'ref.json']
    monkeypatch.setattr(project, 'url', lambda path: 'http://127.0.0.1:9/' + path)
    assert results.load_reference('bench/ref.json', timeout=5) is None
    assert '失败（URLError' in capsys.readouterr().out
