"""Fashion-MNIST for both editions: find, verify, download and parse.

Framework-neutral: everything here returns numpy arrays. The MXNet and
PyTorch modules wrap them into data iterators (book section 3.5,
``load_data_fashion_mnist``).

Where the four files are looked for, in this order:

1. the ``root`` argument;
2. the folder named by ``$D2LZH_DATA_DIR``;
3. MXNet's own cache, ``$MXNET_HOME/datasets/fashion-mnist``
   (``~/.mxnet/datasets/fashion-mnist`` by default);
4. ``/usr/share/datasets/fashion-mnist`` (Debian's package
   ``dataset-fashion-mnist``; read-only, never written to).

If none has them, they are downloaded from the upstream mirror (or
``$D2LZH_DATA_URL``) into the first writable place of 1-3. Every file, found
or downloaded, is checked against the SHA-256 of its *decompressed* content
before it is used, so a recompressed copy (Debian's) is accepted and a
truncated, corrupt or wrong file never is. Beside each ``.gz`` read from 1-3,
a verified decompressed copy is kept and read from then on (0.3 s less per
start; see ``_read_fast``).
"""
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

from .checks import check_positive_int  # noqa: F401  (re-exported)
from .results import note_data_subset

__all__ = ['FashionMNISTNotFoundError', 'CorruptDataError', 'DataDirWarning', 'FILES',
           'TRAIN_SIZE', 'TEST_SIZE', 'TEXT_LABELS', 'SYSTEM_DIR', 'DEFAULT_URL', 'candidate_dirs',
           'find_fashion_mnist', 'download_fashion_mnist', 'read_idx',
           'load_fashion_mnist', 'parse_max_examples', 'max_examples_from_env', 'choose_max_examples',
           'get_fashion_mnist_labels']

FileSpec = namedtuple('FileSpec', ['name', 'sha256', 'gz_sha1'])

#: The four files: decompressed SHA-256 (what we verify) and the upstream
#: ``.gz`` SHA-1 (what MXNet's own FashionMNIST class checks; for reference).
FILES = {
    'train_images': FileSpec(
        'train-images-idx3-ubyte',
        'c59f468a2f672dc815687fe0f83887768d799fd8a3f3276145d20f83aa44d888',
        '0cf37b0d40ed5169c6b3aba31069a9770ac9043d'),
    'train_labels': FileSpec(
        'train-labels-idx1-ubyte',
        'bad3541b69d912435c50bb6ba87bec294ff4f6a2e1246121d8633921760443d9',
        '236021d52f1e40852b06a4c3008d8de8aef1e40b'),
    'test_images': FileSpec(
        't10k-images-idx3-ubyte',
        '5b4141f0afbad91edebe8549f8fcffe087ea10ca49f1dbef5c9a5cd8815ce37b',
        '626ed6a7c06dd17c0eec72fa3be1740f146a2863'),
    'test_labels': FileSpec(
        't10k-labels-idx1-ubyte',
        '0402a96d92fd2663957122ceb108a494c5af83dab82d92729df917d7dec38c34',
        '17f9ab60e7257a1620f4ad76bbbaf857c3920701'),
}
TRAIN_SIZE, TEST_SIZE = 60000, 10000
TEXT_LABELS = ('t-shirt', 'trouser', 'pullover', 'dress', 'coat',
               'sandal', 'shirt', 'sneaker', 'bag', 'ankle boot')
SYSTEM_DIR = Path('/usr/share/datasets/fashion-mnist')
DEFAULT_URL = 'http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/'

_HOW_TO_PROVIDE = (
    'Ways to provide the data:\n'
    '  * on Debian/Ubuntu: `sudo apt-get install dataset-fashion-mnist` '
    '(installs it in /usr/share/datasets/fashion-mnist; `make data` does this);\n'
    '  * copy the four files train-images-idx3-ubyte.gz, train-labels-idx1-ubyte.gz, '
    't10k-images-idx3-ubyte.gz and t10k-labels-idx1-ubyte.gz into a folder and set '
    'D2LZH_DATA_DIR to it (or pass root=...);\n'
    '  * connect to the internet and run again: they are downloaded into MXNet\'s cache '
    '(set D2LZH_DATA_URL to use another mirror).')


class FashionMNISTNotFoundError(FileNotFoundError):
    """The data is in none of the places searched and could not be downloaded."""


class CorruptDataError(ValueError):
    """A data file exists but its content is not the expected one."""


class DataDirWarning(UserWarning):
    """A folder the user named (``root=`` or ``$D2LZH_DATA_DIR``) cannot be used."""


def _mxnet_cache_dir():
    home = os.environ.get('MXNET_HOME') or os.path.join('~', '.mxnet')
    return Path(home).expanduser() / 'datasets' / 'fashion-mnist'


def candidate_dirs(root=None):
    """Return the folders searched for the data, in order.

    Args:
        root (str or os.PathLike or None): a folder given by the caller.

    Returns:
        list of (pathlib.Path, str): each folder and where it comes from.
    """
    dirs = []
    if root is not None:
        dirs.append((Path(root).expanduser(), 'the root argument'))
    env = os.environ.get('D2LZH_DATA_DIR')
    if env:
        dirs.append((Path(env).expanduser(), '$D2LZH_DATA_DIR'))
    dirs.append((_mxnet_cache_dir(), "MXNet's cache"))
    dirs.append((SYSTEM_DIR, "Debian's package dataset-fashion-mnist"))
    return dirs


def _file_in(folder, spec):
    """Path of ``spec``'s file in ``folder`` (.gz preferred), or None."""
    for name in (spec.name + '.gz', spec.name):
        path = folder / name
        if path.is_file():
            return path
    return None


def _read_verified(path, spec, gz=None):
    """Return the decompressed bytes of ``path`` if they match ``spec``.

    ``gz`` says whether the file is gzip-compressed (default: its name ends
    in ``.gz``).

    Raises:
        CorruptDataError: the file cannot be decompressed or its SHA-256 is
            not the expected one. The message names the file and the fix.
    """
    if gz is None:
        gz = path.suffix == '.gz'
    try:
        with open(path, 'rb') as f:
            raw = f.read()
        content = gzip.decompress(raw) if gz else raw
    except (OSError, EOFError, gzip.BadGzipFile) as err:
        raise CorruptDataError(
            f'{path} is not a readable {"gzip " if gz else ""}file '
            f'({err}); it is probably truncated. It was not used: delete it and run '
            'again to fetch a good copy, or provide the data another way.\n'
            + _HOW_TO_PROVIDE) from err
    digest = hashlib.sha256(content).hexdigest()
    if digest != spec.sha256:
        raise CorruptDataError(
            f'{path} does not hold the expected Fashion-MNIST file {spec.name}: the '
            f'SHA-256 of its content is {digest}, expected {spec.sha256}. It was not '
            'used: it is corrupt, truncated or a different file. Delete it and run '
            'again, or provide the data another way.\n' + _HOW_TO_PROVIDE)
    return content


def _download_one(url, dest, spec, progress=True, timeout=60):
    """Download ``url`` to ``dest`` through a temporary file, verify, rename."""
    from tqdm.auto import tqdm

    fd, tmp = tempfile.mkstemp(prefix=f'.{spec.name}.', suffix='.part', dir=dest.parent)
    try:
        with os.fdopen(fd, 'wb') as out, urllib.request.urlopen(url, timeout=timeout) as resp:
            total = int(resp.headers.get('Content-Length') or 0) or None
            with tqdm(total=total, unit='B', unit_scale=True, desc=dest.name,
                      disable=not progress) as bar:
                while True:
                    chunk = resp.read(1 << 16)
                    if not chunk:
                        break
                    out.write(chunk)
                    bar.update(len(chunk))
        if total is not None and os.path.getsize(tmp) != total:
            raise CorruptDataError(
                f'download of {url} stopped after {os.path.getsize(tmp)} of {total} bytes')
        _read_verified(Path(tmp), spec, gz=True)
        os.replace(tmp, dest)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)



def download_fashion_mnist(dest, url=None, progress=True):
    """Download the files missing from ``dest`` and verify each one.

    Each file goes to a temporary name in ``dest``, is verified, and only then
    renamed to its final name; a failed or interrupted download leaves nothing
    behind and never replaces a file already there.

    Args:
        dest (str or os.PathLike): folder to write into (created if needed).
        url (str or None): mirror base URL; default ``$D2LZH_DATA_URL`` or
            :data:`DEFAULT_URL`.
        progress (bool): show a tqdm progress bar per file.

    Returns:
        pathlib.Path: ``dest``.

    Raises:
        OSError: ``dest`` cannot be written, or the network fails.
        CorruptDataError: a downloaded file does not verify.
    """
    dest = Path(dest).expanduser()
    dest.mkdir(parents=True, exist_ok=True)
    base = url or os.environ.get('D2LZH_DATA_URL') or DEFAULT_URL
    if not base.endswith('/'):
        base += '/'
    for spec in FILES.values():
        if _file_in(dest, spec) is None:
            _download_one(base + spec.name + '.gz', dest / (spec.name + '.gz'), spec,
                          progress=progress)
    return dest


def _complete(folder):
    return all(_file_in(folder, spec) is not None for spec in FILES.values())


#: Where a folder comes from, for the folders the user named.
_USER_NAMED = ('the root argument', '$D2LZH_DATA_DIR')


def _why_unusable(folder):
    """Why ``folder`` cannot provide the data (one phrase), or None if it can."""
    if not folder.exists():
        return 'it does not exist'
    if not folder.is_dir():
        return 'it is not a folder'
    if not os.access(folder, os.R_OK | os.X_OK):
        return 'it cannot be read (permissions)'
    missing = [spec.name + '.gz' for spec in FILES.values() if _file_in(folder, spec) is None]
    if missing:
        return (f'{len(missing)} of the {len(FILES)} files are missing: '
                + ', '.join(missing) + ' (or the same names without .gz)')
    return None


def _warn_skipped(folder, why, reason, later):
    """Warn that a folder the user named is skipped, before anything else is tried."""
    named = f'D2LZH_DATA_DIR={folder}' if why == '$D2LZH_DATA_DIR' else f'root={folder}'
    warnings.warn(f'{named} cannot be used: {reason}. {later}', DataDirWarning, stacklevel=3)


def find_fashion_mnist(root=None, download=True, progress=True):
    """Return the folder that holds all four Fashion-MNIST files.

    Searches :func:`candidate_dirs` in order and takes the first folder that
    has all four files (``.gz`` or decompressed). If none has, downloads into
    the first writable folder among ``root``, ``$D2LZH_DATA_DIR`` and MXNet's
    cache. Does not verify checksums (:func:`load_fashion_mnist` does).

    Args:
        root (str or os.PathLike or None): folder to search first.
        download (bool): allow the download; with False a missing data set
            raises at once.
        progress (bool): show a progress bar while downloading.

    Returns:
        pathlib.Path: the folder.

    Warns:
        DataDirWarning: a folder the user named (``root`` or
            ``$D2LZH_DATA_DIR``) lacks files, does not exist or cannot be
            read, or downloading into it failed; the warning gives the reason
            and where the search goes next, before the next place is tried.

    Raises:
        FashionMNISTNotFoundError: no folder has the data and the download
            was not allowed or failed; the message lists every folder searched
            and the ways to provide the data.
    """
    searched = candidate_dirs(root)
    for i, (folder, why) in enumerate(searched):
        reason = _why_unusable(folder)
        if reason is None:
            return folder
        if why in _USER_NAMED:
            rest = ', '.join(f'{d} ({w})' for d, w in searched[i + 1:])
            then = (f'; if none has the data, it is downloaded into {searched[0][0]}'
                    + ('' if root is not None else ' (or the next writable place)')
                    if download else '')
            _warn_skipped(folder, why, reason, f'Looking next in: {rest}{then}')
    failure = 'downloading was not allowed (download=False)'
    if download:
        targets = [(d, why) for d, why in searched
                   if why != "Debian's package dataset-fashion-mnist"]
        errors = []
        for i, (target, why) in enumerate(targets[:1] if root is not None else targets):
            try:
                return download_fashion_mnist(target, progress=progress)
            except (OSError, http.client.HTTPException, CorruptDataError) as err:
                errors.append(f'{target}: {err}')
                if why in _USER_NAMED and i + 1 < len(targets) and root is None:
                    _warn_skipped(target, why, f'downloading into it failed ({err})',
                                  f'Downloading into {targets[i + 1][0]} instead')
        failure = 'the download failed: ' + '; '.join(errors)
    places = '\n'.join(f'  * {folder} ({why})' for folder, why in searched)
    raise FashionMNISTNotFoundError(
        'Fashion-MNIST was not found. Searched, in this order:\n' + places +
        f'\nand {failure}.\n' + _HOW_TO_PROVIDE)


def read_idx(content, name='IDX data'):
    """Parse the bytes of an IDX file (the MNIST format) into a numpy array.

    Args:
        content (bytes): the decompressed file.
        name (str): used in error messages.

    Returns:
        numpy.ndarray: uint8, shape given by the header (e.g. (60000, 28, 28)
        for images, (60000,) for labels).

    Raises:
        CorruptDataError: bad magic number, unsupported type code, or a size
            that does not match the header.
    """
    if len(content) < 4 or content[0] != 0 or content[1] != 0:
        raise CorruptDataError(f'{name} is not an IDX file (bad magic number)')
    type_code, ndim = content[2], content[3]
    if type_code != 0x08:
        raise CorruptDataError(f'{name}: IDX type code 0x{type_code:02x} is not unsigned byte')
    header = 4 + 4 * ndim
    if len(content) < header:
        raise CorruptDataError(f'{name}: IDX header is truncated')
    shape = struct.unpack('>' + 'I' * ndim, content[4:header])
    expected = header + int(np.prod(shape, dtype=np.int64))
    if len(content) != expected:
        raise CorruptDataError(
            f'{name}: IDX header says shape {shape} ({expected} bytes) but the file '
            f'has {len(content)} bytes')
    return np.frombuffer(content, dtype=np.uint8, offset=header).reshape(shape)


def parse_max_examples(value, what='max_examples'):
    """Validate a subset size.

    Args:
        value (int, str or None): a positive whole number, ``'all'`` or None
            (both mean the full data set). Strings of digits are accepted.
        what (str): the name used in the error message.

    Returns:
        int or None: the number of examples, or None for all of them.

    Raises:
        ValueError: anything else (zero, negative, fractional, other text).
    """
    if value is None:
        return None
    if isinstance(value, str):
        text = value.strip().lower()
        if text in ('', 'all'):
            return None
        if text.isdigit() and int(text) > 0:
            return int(text)
    elif isinstance(value, (int, np.integer)) and not isinstance(value, bool) and value > 0:
        return int(value)
    raise ValueError(
        f'{what}={value!r} is not valid: use a positive whole number of examples '
        "(e.g. 2000) or 'all' for the full data set (60,000 training and 10,000 "
        'test images).')


def max_examples_from_env():
    """Read ``$D2LZH_MAX_EXAMPLES``: int, or None when unset or ``all``.

    Raises:
        ValueError: the variable holds anything but a positive whole number
            or ``all``.
    """
    return parse_max_examples(os.environ.get('D2LZH_MAX_EXAMPLES'), 'D2LZH_MAX_EXAMPLES')


def _read_fast(folder, spec):
    """Verified decompressed bytes of ``spec``'s file in ``folder``, and the path read.

    Decompressing the four ``.gz`` files takes about 0.3 s, a large part of a
    cold start (notebook 在现代 GPU 上把训练跑满). So the decompressed file
    (``spec.name`` without ``.gz``, 55 MB for all four) is read first when it
    is there, and after a ``.gz`` has been read and verified, its decompressed
    content is written beside it (not into ``SYSTEM_DIR``): to a temporary file
    that is then renamed, so no process ever sees half of it. Either way the
    SHA-256 of the content is checked. A decompressed copy that fails the check
    is not used, not changed and not deleted: the ``.gz`` is read instead, with
    a :class:`DataDirWarning`. A folder that cannot be written to just gets no
    copy.

    Raises:
        CorruptDataError: the file that was read (the ``.gz``, or the only
            file there is) fails verification.
    """
    plain, packed = folder / spec.name, folder / (spec.name + '.gz')
    if plain.is_file():
        try:
            return _read_verified(plain, spec, gz=False), plain
        except CorruptDataError as err:
            if not packed.is_file():
                raise
            warnings.warn(f'{plain.name} in {folder} fails verification and was not used '
                          f'({str(err).splitlines()[0]}); reading {packed.name} instead. Delete '
                          f'{plain.name} to have a good copy written again.', DataDirWarning,
                          stacklevel=3)
            return _read_verified(packed, spec), packed
    content = _read_verified(packed, spec)
    if folder.resolve() != SYSTEM_DIR.resolve():
        tmp = None
        try:
            with tempfile.NamedTemporaryFile(dir=folder, prefix=f'.{spec.name}.',
                                             delete=False) as f:
                tmp = f.name
                f.write(content)
            os.chmod(tmp, packed.stat().st_mode & 0o777)  # readable by whoever reads the .gz
            os.replace(tmp, plain)
        except OSError:  # read-only folder, disk full: no copy, nothing left behind
            if tmp is not None and os.path.exists(tmp):
                os.unlink(tmp)
    return content, packed


def load_fashion_mnist(root=None, max_examples=None, download=True, progress=True):
    """Load Fashion-MNIST as numpy arrays, verified.

    Args:
        root (str or os.PathLike or None): folder to search first (see the
            module docstring for the full search order).
        max_examples (int, str or None): keep only the first N training and
            the first N test examples. None reads ``$D2LZH_MAX_EXAMPLES``
            (unset means all); ``'all'`` always means the full data set.
        download (bool): allow downloading when no folder has the data.
        progress (bool): progress bar while downloading.

    Returns:
        tuple: ``(train_images, train_labels, test_images, test_labels)``;
        images uint8 of shape (N, 28, 28), labels int32 of shape (N,), with
        N <= 60000 for training and N <= 10000 for test.

    A decompressed copy of each file is kept beside the ``.gz`` and read from
    then on (0.3 s less per start; see ``_read_fast``).

    Raises:
        FashionMNISTNotFoundError: see :func:`find_fashion_mnist`.
        CorruptDataError: a file fails verification (the message names it).
        ValueError: invalid ``max_examples`` or ``$D2LZH_MAX_EXAMPLES``.
    """
    if max_examples is None:
        limit = max_examples_from_env()
    else:
        limit = parse_max_examples(max_examples)
    folder = find_fashion_mnist(root, download=download, progress=progress)
    arrays = {}
    for key, spec in FILES.items():
        content, path = _read_fast(folder, spec)
        arrays[key] = read_idx(content, str(path))
    out = []
    for split in ('train', 'test'):
        images, labels = arrays[split + '_images'], arrays[split + '_labels']
        if limit is not None:
            images, labels = images[:limit], labels[:limit]
        out += [images, labels.astype(np.int32)]
    return tuple(out)


def choose_max_examples(cpu_default, gpu_available):
    """Decide how much of Fashion-MNIST a training cell uses, and say so.

    ``$D2LZH_MAX_EXAMPLES``, when set, decides. Otherwise a machine with a
    working GPU uses the whole data set (the book's settings) and a CPU-only
    machine uses the first ``cpu_default`` training and test examples, so the
    notebook finishes in minutes. Prints one line (Chinese) with the choice
    and the reason.

    Args:
        cpu_default (int): subset size for CPU-only machines.
        gpu_available (bool): whether the framework found a working GPU.

    Returns:
        int or None: the subset size, None for the full data set.

    Raises:
        ValueError: ``$D2LZH_MAX_EXAMPLES`` or ``cpu_default`` is invalid.
    """
    env = os.environ.get('D2LZH_MAX_EXAMPLES')
    if env is not None and env.strip():
        n = max_examples_from_env()
        why = f'环境变量 D2LZH_MAX_EXAMPLES={env.strip()}'
    elif gpu_available:
        n, why = None, '检测到可用的 GPU，按书中设置'
    else:
        n = parse_max_examples(cpu_default, 'cpu_default')
        why = ('没有可用的 GPU：为了在 CPU 上几分钟内跑完，只用数据的一个子集'
               '（设 D2LZH_MAX_EXAMPLES=all 可用全部数据，2 核 CPU 上会慢得多）')
    # make run's summary labels the figures recorded from now on with this choice
    note_data_subset(None if n is None else min(n, TRAIN_SIZE), gpu_available)
    if n is None:
        print(f'{why}：使用全部 {TRAIN_SIZE} 张训练图像和 {TEST_SIZE} 张测试图像。')
    else:
        print(f'{why}：使用前 {min(n, TRAIN_SIZE)}/{TRAIN_SIZE} 张训练图像和前 '
              f'{min(n, TEST_SIZE)}/{TEST_SIZE} 张测试图像。')
    return n


class MinibatchIter:
    """What the two editions' Fashion-MNIST iterators share: ``len()`` is the
    number of minibatches of ``batch_size`` (the last may be smaller) and
    ``num_examples`` the number of examples in one pass. Subclasses set
    ``self.labels`` and ``self.batch_size`` and define ``__iter__``."""

    def __len__(self):
        return (len(self.labels) + self.batch_size - 1) // self.batch_size

    @property
    def num_examples(self):
        """Number of examples in one pass."""
        return len(self.labels)


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
        print(f'error: {err}', file=sys.stderr)
        return 1
    print(f'Fashion-MNIST verified in {folder}: {len(train_x)} training and '
          f'{len(test_x)} test images')
    return 0


if __name__ == '__main__':
    raise SystemExit(main())
