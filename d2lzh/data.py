"""Fashion-MNIST for both editions: find, verify, download and parse into numpy arrays (book
3.5); each edition wraps them into minibatch iterators (``load_data_fashion_mnist``).

Looked for in ``root``, ``$D2LZH_DATA_DIR``, MXNet's cache (``$MXNET_HOME/datasets/
fashion-mnist``) and Debian's read-only ``/usr/share/datasets/fashion-mnist``; else downloaded
(``$D2LZH_DATA_URL``) into the first writable of the first three. Each file must match the SHA-256
of its *decompressed* content (Debian's recompressed copy passes, a truncated file never does).
Beside each ``.gz`` read (not Debian's) a verified decompressed copy is kept and read from then on
(55 MB for all four, 0.3 s less per start; replaced if it fails; ``$D2LZH_DATA_COPY=0``: none)."""
import gzip
import hashlib
import http.client
import os
import struct
import tempfile
import urllib.request
import warnings
from collections import namedtuple
from pathlib import Path

import numpy as np

from .checks import whole
from .setup.gpus import gpus_in_use

FileSpec = namedtuple('FileSpec', ['name', 'sha256'])

#: The four files and the SHA-256 of their decompressed content (what is verified).
FILES = {
    'train_images': FileSpec('train-images-idx3-ubyte',
                             'c59f468a2f672dc815687fe0f83887768d799fd8a3f3276145d20f83aa44d888'),
    'train_labels': FileSpec('train-labels-idx1-ubyte',
                             'bad3541b69d912435c50bb6ba87bec294ff4f6a2e1246121d8633921760443d9'),
    'test_images': FileSpec('t10k-images-idx3-ubyte',
                            '5b4141f0afbad91edebe8549f8fcffe087ea10ca49f1dbef5c9a5cd8815ce37b'),
    'test_labels': FileSpec('t10k-labels-idx1-ubyte',
                            '0402a96d92fd2663957122ceb108a494c5af83dab82d92729df917d7dec38c34'),
}
TRAIN_SIZE, TEST_SIZE = 60000, 10000
TEXT_LABELS = ('t-shirt', 'trouser', 'pullover', 'dress', 'coat',
               'sandal', 'shirt', 'sneaker', 'bag', 'ankle boot')
SYSTEM_DIR = Path('/usr/share/datasets/fashion-mnist')
DEFAULT_URL = 'http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/'

_HOW_TO_PROVIDE = (
    '提供数据的办法：\n'
    '  * 在 Debian/Ubuntu 上：`sudo apt-get install dataset-fashion-mnist`'
    '（装到 /usr/share/datasets/fashion-mnist；`make data` 就是这样做的）；\n'
    '  * 把 train-images-idx3-ubyte.gz、train-labels-idx1-ubyte.gz、'
    't10k-images-idx3-ubyte.gz 和 t10k-labels-idx1-ubyte.gz 这四个文件复制到一个文件夹，'
    '再把 D2LZH_DATA_DIR 设为这个文件夹（或者传入 root=...）；\n'
    '  * 连上网络再运行一次：它们会被下载到 MXNet 的缓存里'
    '（设 D2LZH_DATA_URL 可以换用别的镜像）。')
_USER_NAMED = ('root 参数', '$D2LZH_DATA_DIR')


class FashionMNISTNotFoundError(FileNotFoundError):
    """The data is in none of the places searched and could not be downloaded."""


class CorruptDataError(ValueError):
    """A data file exists but its content is not the expected one."""


class DataDirWarning(UserWarning):
    """A folder the user named (``root=`` or ``$D2LZH_DATA_DIR``) cannot be used, or a
    decompressed copy failed verification."""


def candidate_dirs(root=None):
    """The folders searched for the data, in order: list of (pathlib.Path, where from)."""
    dirs = [] if root is None else [(Path(root).expanduser(), 'root 参数')]
    if os.environ.get('D2LZH_DATA_DIR'):
        dirs.append((Path(os.environ['D2LZH_DATA_DIR']).expanduser(), '$D2LZH_DATA_DIR'))
    home = os.environ.get('MXNET_HOME') or os.path.join('~', '.mxnet')
    dirs.append((Path(home).expanduser() / 'datasets' / 'fashion-mnist', 'MXNet 的缓存'))
    dirs.append((SYSTEM_DIR, 'Debian 的软件包 dataset-fashion-mnist'))
    return dirs


def _file_in(folder, spec):
    """Path of ``spec``'s file in ``folder`` (.gz preferred), or None."""
    for path in (folder / (spec.name + '.gz'), folder / spec.name):
        if path.is_file():
            return path
    return None


def _read_verified(path, spec, gz=None, raw=None):
    """The decompressed bytes of ``path`` (or of ``raw``, bytes said to come from it),
    gzip when ``gz`` (default: by the file name's suffix).

    Raises:
        CorruptDataError: the file is not gzip, cannot be decompressed, or its content's
            SHA-256 is not ``spec.sha256``. The message names the file and the fix.
    """
    gz = path.suffix == '.gz' if gz is None else gz
    if raw is None:
        with open(path, 'rb') as f:
            raw = f.read()
    fix = ('没有使用这个文件：请删掉它，再运行一次以重新获取完好的文件，或者用别的办法'
           '提供数据。\n' + _HOW_TO_PROVIDE)
    if gz and raw[:2] != b'\x1f\x8b':
        raise CorruptDataError(f'{path} 不是 gzip 文件（它的开头不是 gzip 的签名 1f 8b）。'
                               f'{fix}')
    try:
        content = gzip.decompress(raw) if gz else raw
    except (OSError, EOFError) as err:
        raise CorruptDataError(f'{path} 无法解压（{err}），它多半不完整（被截断了）。'
                               f'{fix}') from err
    digest = hashlib.sha256(content).hexdigest()
    if digest != spec.sha256:
        raise CorruptDataError(
            f'{path} 不是预期的 Fashion-MNIST 文件 {spec.name}：它内容的 SHA-256 是 {digest}，'
            f'应该是 {spec.sha256}。它已损坏、被截断，或者是别的文件。{fix}')
    return content


def _write_atomically(dest, content, mode=None):
    """Write ``content`` to a temporary file beside ``dest`` and rename it into place, so
    that no reader ever sees half a file. Nothing is left behind when it fails.

    Raises:
        OSError: the folder cannot be written.
    """
    fd, tmp = tempfile.mkstemp(prefix=f'.{dest.name}.', suffix='.part', dir=dest.parent)
    try:
        with os.fdopen(fd, 'wb') as f:
            f.write(content)
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, dest)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def _download_one(url, dest, spec, progress=True, timeout=60):
    """Download ``url``, verify it, and only then write it to ``dest``."""
    from tqdm.auto import tqdm

    chunks = []
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        total = int(resp.headers.get('Content-Length') or 0) or None
        with tqdm(total=total, unit='B', unit_scale=True, desc=dest.name,
                  disable=not progress) as bar:
            while chunk := resp.read(1 << 16):
                chunks.append(chunk)
                bar.update(len(chunk))
    raw = b''.join(chunks)
    if total is not None and len(raw) != total:
        raise CorruptDataError(f'下载 {url} 时中断：{total} 字节只收到了 {len(raw)} 字节')
    _read_verified(dest, spec, gz=True, raw=raw)
    _write_atomically(dest, raw)


def download_fashion_mnist(dest, url=None, progress=True):
    """Download into folder ``dest`` (created if needed; returned as a Path) the files it
    lacks, from ``url`` (default ``$D2LZH_DATA_URL`` or :data:`DEFAULT_URL`), with tqdm bars if
    ``progress``. A file gets its name only once verified: a failed or interrupted download
    leaves nothing and replaces nothing. OSError: ``dest`` cannot be written, or the network
    fails; CorruptDataError: a downloaded file does not verify."""
    dest = Path(dest).expanduser()
    dest.mkdir(parents=True, exist_ok=True)
    base = url or os.environ.get('D2LZH_DATA_URL') or DEFAULT_URL
    base += '' if base.endswith('/') else '/'
    for spec in FILES.values():
        if _file_in(dest, spec) is None:
            _download_one(base + spec.name + '.gz', dest / (spec.name + '.gz'), spec, progress)
    return dest


def _why_unusable(folder):
    """Why ``folder`` cannot provide the data (one phrase), or None if it can."""
    if not folder.exists():
        return '它不存在'
    if not folder.is_dir():
        return '它不是文件夹'
    if not os.access(folder, os.R_OK | os.X_OK):
        return '没有读取它的权限'
    missing = [spec.name + '.gz' for spec in FILES.values() if _file_in(folder, spec) is None]
    if missing:
        return (f'{len(FILES)} 个文件中缺了 {len(missing)} 个：' + ', '.join(missing)
                + '（或去掉 .gz 的同名文件）')
    return None


def _warn_skipped(folder, why, reason, later):
    """Warn that a folder the user named is skipped, before anything else is tried."""
    named = f'D2LZH_DATA_DIR={folder}' if why == '$D2LZH_DATA_DIR' else f'root={folder}'
    warnings.warn(f'{named} 不能用：{reason}。{later}', DataDirWarning, stacklevel=3)


def find_fashion_mnist(root=None, download=True, progress=True):
    """The folder (Path) that holds all four Fashion-MNIST files (``.gz`` or decompressed;
    not yet verified): the first of :func:`candidate_dirs` that has them; else, if
    ``download``, the first writable of ``root``, ``$D2LZH_DATA_DIR``, MXNet's cache, where
    they are downloaded (progress bars if ``progress``). A folder the user named that lacks
    files, does not exist, cannot be read or written gives a DataDirWarning saying why and
    where the search goes next. FashionMNISTNotFoundError: no folder has the data and the
    download was not allowed or failed; the message lists the folders and the ways to provide it."""
    searched = candidate_dirs(root)
    for i, (folder, why) in enumerate(searched):
        reason = _why_unusable(folder)
        if reason is None:
            return folder
        if why in _USER_NAMED:
            rest = '、'.join(f'{d}（{w}）' for d, w in searched[i + 1:])
            then = (f'；哪里都没有数据时，下载到 {searched[0][0]}'
                    + ('' if root is not None else '（或下一个可写的位置）') if download else '')
            _warn_skipped(folder, why, reason, f'接着在这些位置找：{rest}{then}')
    failure = '不允许下载（download=False）'
    if download:
        targets = [(d, why) for d, why in searched if d != SYSTEM_DIR]
        errors = []
        for i, (target, why) in enumerate(targets[:1] if root is not None else targets):
            try:
                return download_fashion_mnist(target, progress=progress)
            except (OSError, http.client.HTTPException, CorruptDataError) as err:
                errors.append(f'{target}：{err}')
                if why in _USER_NAMED and i + 1 < len(targets) and root is None:
                    _warn_skipped(target, why, f'下载到这里失败（{err}）',
                                  f'改为下载到 {targets[i + 1][0]}')
        failure = '下载失败：' + '；'.join(errors)
    places = '\n'.join(f'  * {folder}（{why}）' for folder, why in searched)
    raise FashionMNISTNotFoundError('找不到 Fashion-MNIST。按顺序找过这些位置：\n'
                                    + places + f'\n而且{failure}。\n' + _HOW_TO_PROVIDE)


def read_idx(content, name='IDX 数据'):
    """Parse the bytes of an IDX file (the MNIST format) into a uint8 numpy array shaped as
    its header says, e.g. (60000, 28, 28) or (60000,). CorruptDataError, naming ``name``: bad
    magic number, a type other than unsigned byte, or a size that does not match the header."""
    if len(content) < 4 or content[0] != 0 or content[1] != 0:
        raise CorruptDataError(f'{name} 不是 IDX 文件（魔数不对）')
    type_code, ndim = content[2], content[3]
    if type_code != 0x08:
        raise CorruptDataError(f'{name}：IDX 类型码 0x{type_code:02x} 不是无符号字节（0x08）')
    header = 4 + 4 * ndim
    if len(content) < header:
        raise CorruptDataError(f'{name}：IDX 文件头不完整（被截断了）')
    shape = struct.unpack('>' + 'I' * ndim, content[4:header])
    expected = header + int(np.prod(shape, dtype=np.int64))
    if len(content) != expected:
        raise CorruptDataError(f'{name}：IDX 文件头说形状是 {shape}（应有 {expected} 字节），'
                               f'文件却有 {len(content)} 字节')
    return np.frombuffer(content, dtype=np.uint8, offset=header).reshape(shape)


def _read_fast(folder, spec):
    """Verified decompressed bytes of ``spec``'s file in ``folder``, and the path read: the
    decompressed copy if it verifies, else the ``.gz`` (a bad copy gives a DataDirWarning),
    then a verified copy is written beside it unless the folder is :data:`SYSTEM_DIR`,
    ``$D2LZH_DATA_COPY=0``, or it cannot be written. CorruptDataError: the file that had to
    be read (the ``.gz``, or the only file there is) fails verification."""
    plain, packed = folder / spec.name, folder / (spec.name + '.gz')
    if plain.is_file():
        try:
            return _read_verified(plain, spec, gz=False), plain
        except CorruptDataError as err:
            if not packed.is_file():
                raise
            warnings.warn(f'{folder} 中的 {plain.name} 没有通过校验，不用它（'
                          f'{str(err).splitlines()[0]}）；改读 {packed.name}，并换上校验过的'
                          '解压文件。', DataDirWarning, stacklevel=3)
    content = _read_verified(packed, spec)
    if os.environ.get('D2LZH_DATA_COPY', '1') != '0' and \
            folder.resolve() != SYSTEM_DIR.resolve():
        try:  # as readable as the .gz; a read-only folder or full disk: no copy
            _write_atomically(plain, content, packed.stat().st_mode & 0o777)
        except OSError:
            pass
    return content, packed


def load_fashion_mnist(root=None, max_examples=None, download=True, progress=True):
    """Fashion-MNIST as verified numpy arrays (book 3.5): ``(train_images, train_labels,
    test_images, test_labels)``, images uint8 (N, 28, 28), labels int32 (N,), N <= 60000 for
    training, <= 10000 for test. ``max_examples`` (int, str or None): the first N training and
    the first N test examples; None: ``$D2LZH_MAX_EXAMPLES`` (unset: all); 'all': all.
    ``root``, ``download``, ``progress`` and FashionMNISTNotFoundError: as
    :func:`find_fashion_mnist`. CorruptDataError: a file fails verification (named);
    ValueError: invalid ``max_examples`` or ``$D2LZH_MAX_EXAMPLES``."""
    limit = max_examples_from_env() if max_examples is None else \
        parse_max_examples(max_examples)
    folder = find_fashion_mnist(root, download=download, progress=progress)
    arrays = {}
    for key, spec in FILES.items():
        content, path = _read_fast(folder, spec)
        arrays[key] = read_idx(content, str(path))
    out = []
    for split in ('train', 'test'):
        images, labels = arrays[split + '_images'], arrays[split + '_labels']
        out += [images[:limit], labels[:limit].astype(np.int32)]
    return tuple(out)


class MinibatchIter:
    """What both editions' Fashion-MNIST iterators share: ``len()`` is the number of
    minibatches of ``batch_size`` (the last may be smaller) and ``num_examples`` the
    examples of one pass. Subclasses set ``labels`` and ``batch_size``, define ``__iter__``."""

    def __len__(self):
        return (len(self.labels) + self.batch_size - 1) // self.batch_size

    @property
    def num_examples(self):
        """Number of examples in one pass."""
        return len(self.labels)


#: The training images the figures recorded from now on used (:func:`d2lzh.results.record`):
#: ``{'subset': int or None}``, set by :func:`choose_max_examples`.
CONTEXT = {}


def parse_max_examples(value, what='max_examples'):
    """A subset size: a positive int (or string of digits) -> int; None or 'all' -> None.
    Raises ValueError for anything else (zero, negative, fractional, text), naming ``what``."""
    if value is None:
        return None
    if isinstance(value, str):
        text = value.strip().lower()
        if text in ('', 'all'):
            return None
        if text.isdigit() and int(text) > 0:
            return int(text)
    elif whole(value, 1):
        return int(value)  # int or a numpy integer
    raise ValueError(f'{what}={value!r} 无效：请用正整数表示样本数（例如 2000），或者用 '
                     f"'all' 表示全部数据（{TRAIN_SIZE:,} 张训练图像和 {TEST_SIZE:,} 张测试图像）。")


def max_examples_from_env():
    """``$D2LZH_MAX_EXAMPLES`` as an int, or None when unset or ``all`` (ValueError else)."""
    return parse_max_examples(os.environ.get('D2LZH_MAX_EXAMPLES'), 'D2LZH_MAX_EXAMPLES')


def choose_max_examples(cpu_default, gpu_available=None):
    """How much of Fashion-MNIST a training cell uses (None: all, else the first N training and
    test images); prints the choice and why (Chinese) and notes it for the figures recorded
    after it. ``$D2LZH_MAX_EXAMPLES``, when set, decides (``make test``: 128). Otherwise a
    machine with a GPU the imported edition can use (``gpu_available``, bool, by default asked
    of that edition) takes all the data, the book's setting, and a CPU-only machine the first
    ``cpu_default`` (int), so that the notebook ends in minutes; ``cpu_default=None``: all the
    data there too. ValueError: an invalid size."""
    gpu_available = bool(gpus_in_use()) if gpu_available is None else gpu_available
    env = os.environ.get('D2LZH_MAX_EXAMPLES', '').strip()
    if env:
        n, why = max_examples_from_env(), f'环境变量 D2LZH_MAX_EXAMPLES={env}'
    elif gpu_available or cpu_default is None:
        n, why = None, '检测到可用的 GPU，按书中设置' if gpu_available else '按书中设置'
    else:
        n = parse_max_examples(cpu_default, 'cpu_default')
        why = ('没有可用的 GPU：为了在 CPU 上几分钟内跑完，只用数据的一个子集'
               '（设 D2LZH_MAX_EXAMPLES=all 可用全部数据，2 核 CPU 上会慢得多）')
    CONTEXT['subset'] = None if n is None else min(n, TRAIN_SIZE)  # for d2l.record
    if n is None:
        print(f'{why}：使用全部 {TRAIN_SIZE} 张训练图像和 {TEST_SIZE} 张测试图像。')
    else:
        print(f'{why}：使用前 {min(n, TRAIN_SIZE)}/{TRAIN_SIZE} 张训练图像和前 '
              f'{min(n, TEST_SIZE)}/{TEST_SIZE} 张测试图像。')
    return n


def get_fashion_mnist_labels(labels):
    """Map numeric labels (ints or an array) to their text names (book 3.5)."""
    return [TEXT_LABELS[int(i)] for i in labels]


def main():
    """``python -m d2lzh.data``: find (or download) and verify the data, say where."""
    import sys
    try:
        folder = find_fashion_mnist()
        train_x, _, test_x, _ = load_fashion_mnist(folder, max_examples='all')
    except (FashionMNISTNotFoundError, CorruptDataError) as err:
        print(f'错误：{err}', file=sys.stderr)
        return 1
    print(f'Fashion-MNIST 已通过校验，位于 {folder}：{len(train_x)} 张训练图像和 '
          f'{len(test_x)} 张测试图像')
    return 0


if __name__ == '__main__':
    raise SystemExit(main())
