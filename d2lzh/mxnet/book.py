"""The MXNet/Gluon helpers the book's chapters call (d2lzh 1.0 API, plus ``lenet``).

Importing it imports MXNet (:func:`d2lzh.setup.import_mxnet`); ``import d2lzh as d2l`` and
``import d2lzh.mxnet`` give its names lazily. Book sections: 3.5 (Fashion-MNIST), 3.2/3.6
(``sgd``, ``evaluate_accuracy``), 4.6 (``try_gpu``), 5.11 (``Residual``), 8.4 (``lenet``,
``split_and_load``, ``allreduce``, ``get_params``), 8.5 (``resnet18``, ``try_all_gpus``).
"""
import os
import platform
import warnings

import numpy as np

from .. import checks as _checks
from .. import data as _data
from .. import results as _results
from ..setup import import_mxnet
from ..setup.cuda11 import no_gpu_warning
from ..setup.gpus import GPUQueryError, query_gpus
from . import BOOK_NAMES

mx = import_mxnet()
from mxnet import autograd, gluon, nd  # noqa: E402, F401 (book names)
from mxnet.gluon import nn  # noqa: E402

__all__ = list(BOOK_NAMES)


# ---------------------------------------------------------------- devices (4.6)

def gpu_name(i):
    """Marketing name of GPU ``i`` from ``nvidia-smi`` (e.g. 'NVIDIA H100 80GB HBM3'),
    or ``'gpu(i)'`` when nvidia-smi does not know it (see :func:`d2lzh.setup.gpus.query_gpus`)."""
    try:
        return query_gpus()[i].name
    except (GPUQueryError, IndexError):
        return f'gpu({i})'


def _probe_gpu(i):
    """Run a real kernel on GPU ``i``; return None if it works, else the reason."""
    try:
        a = nd.ones((4, 4), ctx=mx.gpu(i))
        total = nd.dot(a, a).sum().asscalar()  # launches a kernel and waits for it
    except mx.base.MXNetError as err:
        lines = [ln for ln in str(err).strip().splitlines() if ln.strip()]
        return lines[0] if lines else type(err).__name__
    if total != 64.0:
        return f'a 4x4 matrix product gave {total}, expected 64.0'
    return None


_gpu_cache = None


def _working_gpus():
    """Indices of the GPUs on which this MXNet build can run a kernel, probed once per
    process. A GPU that fails (e.g. an H100 with ``mxnet-cu112``, whose kernels stop at
    sm_86) gives a RuntimeWarning naming it."""
    global _gpu_cache
    if _gpu_cache is None:
        _gpu_cache = []
        count = mx.context.num_gpus()
        if count == 0 and (message := no_gpu_warning()):  # GPU build, no GPU
            warnings.warn(message, RuntimeWarning, stacklevel=3)
        for i in range(count):
            reason = _probe_gpu(i)
            if reason is None:
                _gpu_cache.append(i)
            else:
                warnings.warn(
                    f'GPU {i} ({gpu_name(i)}) is present but MXNet {mx.__version__} cannot '
                    f'run on it: {reason}. Falling back to the CPU. The mxnet-cu112 build '
                    'has kernels for sm_50..sm_86 (Maxwell to Ada, e.g. T4, V100, A100, '
                    'L4) and none for Hopper (H100/H200); use the PyTorch edition there.',
                    RuntimeWarning, stacklevel=3)
    return list(_gpu_cache)


def try_gpu(i=0):
    """Return ``mx.gpu(i)`` (mxnet.Context) if a kernel runs there, else ``mx.cpu()`` (book 4.6)."""
    return mx.gpu(i) if i in _working_gpus() else mx.cpu()


def try_all_gpus():
    """Return every working GPU as a list of contexts, or ``[mx.cpu()]`` (book 8.5)."""
    gpus = [mx.gpu(i) for i in _working_gpus()]
    return gpus or [mx.cpu()]


def try_devices(num):
    """Return ``num`` devices (list of mxnet.Context) for data-parallel code (8.4/8.5):
    GPUs when ``num`` of them work; with none, ``mx.cpu(0) .. mx.cpu(num-1)``, which MXNet
    treats as separate devices (own engine queue and memory; the same cores); with fewer,
    those GPUs and a RuntimeWarning (:func:`d2lzh.checks.choose_gpus`).

    Raises:
        ValueError: ``num`` is not a positive int.
    """
    _checks.check_positive_int('num', num)
    gpus = _checks.choose_gpus(num, _working_gpus(), lambda i: f'gpu({i}) {gpu_name(i)}')
    return [mx.gpu(i) for i in gpus] if gpus else [mx.cpu(i) for i in range(num)]


def describe_devices(devices, num):
    """Say in one Chinese sentence (str) what code written for ``num`` devices really runs
    on, given ``devices = try_devices(num)``: real GPUs, CPU contexts standing in for GPUs
    (same cores, no speed-up), or fewer devices than asked for (beyond the book; 8.3-8.5)."""
    names = ', '.join(str(d) for d in devices)
    if len(devices) < num:
        return (f'要 {num} 个设备，这台机器上只有 {len(devices)} 个可用（{names}）：'
                f'下面按 {num} 个设备写的代码实际只在这 {len(devices)} 个设备上运行，'
                f'它的结果不是真正的 {num} 设备结果。')
    if all(d.device_type == 'gpu' for d in devices):
        return f'在 {num} 块 GPU 上运行：{names}。'
    if num == 1:
        return f'没有可用的 GPU：在 CPU 上下文 {names} 上运行。'
    return (f'没有 {num} 块可用的 GPU：{num} 个设备是 CPU 上下文（{names}），'
            f'它们共用同一组 CPU 核心和内存，代码路径与多 GPU 相同，但不会因此变快。')


# ------------------------------------------------------------- models (5.11, 8.4, 8.5)

class Residual(nn.HybridBlock):
    """The residual block of ResNet (book 5.11): two 3x3 convolutions (``num_channels``
    outputs, the first with ``strides``) with batch norm; the input skips around them,
    through a 1x1 convolution when ``use_1x1conv`` (needed when the channels or the
    resolution change). Input and output: float32 (batch, C, H, W)."""

    def __init__(self, num_channels, use_1x1conv=False, strides=1, **kwargs):
        super().__init__(**kwargs)
        self.conv1 = nn.Conv2D(num_channels, kernel_size=3, padding=1, strides=strides)
        self.conv2 = nn.Conv2D(num_channels, kernel_size=3, padding=1)
        self.conv3 = (nn.Conv2D(num_channels, kernel_size=1, strides=strides)
                      if use_1x1conv else None)
        self.bn1 = nn.BatchNorm()
        self.bn2 = nn.BatchNorm()

    def hybrid_forward(self, F, X):
        Y = F.relu(self.bn1(self.conv1(X)))
        Y = self.bn2(self.conv2(Y))
        shortcut = self.conv3(X) if self.conv3 is not None else X
        return F.relu(Y + shortcut)


def resnet18(num_classes):  #@save
    """ResNet-18 as used in chapter 8.5: a 3x3 stride-1 stem without max
    pooling (suits 28x28 Fashion-MNIST), four stages of two residual blocks
    (64, 128, 256, 512 channels), global average pooling and a dense layer.

    Args:
        num_classes (int): number of outputs.

    Returns:
        mxnet.gluon.nn.HybridSequential: input float32 (batch, C, H, W),
        output float32 (batch, num_classes) logits.
    """
    net = nn.HybridSequential()
    net.add(nn.Conv2D(64, kernel_size=3, strides=1, padding=1),
            nn.BatchNorm(), nn.Activation('relu'))
    for stage, channels in enumerate([64, 128, 256, 512]):
        block = nn.HybridSequential()
        for i in range(2):
            downsample = stage > 0 and i == 0
            block.add(Residual(channels, use_1x1conv=downsample,
                               strides=2 if downsample else 1))
        net.add(block)
    net.add(nn.GlobalAvgPool2D(), nn.Dense(num_classes))
    return net


def lenet():
    """LeNet as section 8.4 trains it, in Gluon layers: conv 3x3 (20) - ReLU - avg pool 2 -
    conv 5x5 (50) - ReLU - avg pool 2 - dense 128 - ReLU - dense 10. Returns a
    HybridSequential, not initialized: float32 (batch, 1, 28, 28) -> (batch, 10) logits."""
    net = nn.HybridSequential()
    net.add(nn.Conv2D(20, kernel_size=3, activation='relu'), nn.AvgPool2D(pool_size=2, strides=2),
            nn.Conv2D(50, kernel_size=5, activation='relu'), nn.AvgPool2D(pool_size=2, strides=2),
            nn.Dense(128, activation='relu'), nn.Dense(10))
    return net


# -------------------------------------------------- data parallelism helpers (8.4)

def split_and_load(data, ctx_list, batch_axis=0, even_split=True):  #@save
    """Split a batch into ``len(ctx_list)`` slices and copy slice i to
    ``ctx_list[i]`` (book 8.4). Even splits are the same as
    ``gluon.utils.split_and_load``; for uneven ones the larger slices come last
    (Gluon puts them first).

    Args:
        data (NDArray or numpy.ndarray): the batch.
        ctx_list (list of mxnet.Context): the devices.
        batch_axis (int): the axis to split along.
        even_split (bool): require equal slices. With False, slice sizes
            differ by at most one example.

    Returns:
        list of NDArray, one per device.

    Raises:
        ValueError: ``even_split`` and the batch size is not a multiple of the
            number of devices, or there are fewer examples than devices.
    """
    if not isinstance(data, nd.NDArray):
        data = nd.array(data)
    n, k = data.shape[batch_axis], len(ctx_list)
    if n < k or (even_split and n % k != 0):
        raise ValueError(
            f'cannot split a batch of {n} examples evenly over {k} devices: use a batch '
            f'size that is a multiple of {k}'
            + ('' if n < k else ', or pass even_split=False to allow unequal slices'))
    bounds = [i * n // k for i in range(k + 1)]
    return [nd.slice_axis(data, axis=batch_axis, begin=bounds[i], end=bounds[i + 1])
            .as_in_context(ctx) for i, ctx in enumerate(ctx_list)]


def allreduce(data):  #@save
    """Sum arrays held on different devices and give every device the sum,
    in place (book 8.4).

    Args:
        data (list of NDArray): same shape, one per device. After the call
            each element holds the element-wise sum of all of them.
    """
    for i in range(1, len(data)):
        data[0][:] += data[i].copyto(data[0].context)
    for i in range(1, len(data)):
        data[0].copyto(data[i])


def get_params(params, ctx):  #@save
    """Copy a list of parameters to device ``ctx`` and allocate their
    gradients there (book 8.4). Returns the new list of NDArrays."""
    new_params = [p.copyto(ctx) for p in params]
    for p in new_params:
        p.attach_grad()
    return new_params


def sgd(params, lr, batch_size):
    """Minibatch SGD in place (book 3.2): each of ``params`` (NDArrays with ``.grad``, sums
    over ``batch_size`` examples) moves by ``-lr * grad / batch_size``."""
    for param in params:
        param[:] = param - lr * param.grad / batch_size


# ------------------------------------------------------------- evaluation (3.6)

def evaluate_accuracy(data_iter, net, ctx=None):
    """Classification accuracy (float in [0, 1]) of ``net`` on ``data_iter`` (book 3.6, 8.5).
    Each batch is split over ``ctx`` (any batch size works); the counts stay on the devices
    until the end: one synchronisation per call.

    Args:
        data_iter: iterable of ``(X, y)`` or ``mx.io.DataBatch``; X float32 (batch, ...),
            y integer class labels (batch,).
        net (callable): maps X to logits (batch, num_classes).
        ctx (Context or list of Context): devices; default ``[mx.cpu()]``.

    Raises:
        ValueError: ``data_iter`` yields no example.
    """
    if ctx is None:
        ctx = [mx.cpu()]
    elif isinstance(ctx, mx.Context):
        ctx = [ctx]
    correct, n = nd.zeros((1,), ctx=mx.cpu()), 0
    for batch in data_iter:
        X, y = (batch.data[0], batch.label[0]) if isinstance(batch, mx.io.DataBatch) else batch
        devices = ctx[:min(len(ctx), X.shape[0])]
        for Xs, ys in zip(split_and_load(X, devices, even_split=False),
                          split_and_load(y, devices, even_split=False)):
            hits = (net(Xs).argmax(axis=1) == ys.astype('float32')).sum()
            correct += hits.copyto(mx.cpu())
        n += X.shape[0]
    _checks.check_examples_seen(n)
    return correct.asscalar() / n


# ---------------------------------------------------------------- data (3.5)

class FashionMNISTIter(_data.MinibatchIter):
    """Minibatches of Fashion-MNIST ``images`` (uint8 (N, 28, 28)) and ``labels`` (int (N,))
    as NDArrays on the CPU (book 3.5): ``(X, y)``, X float32 (batch, 1, H, W) in [0, 1],
    y int32 (batch,); the last batch may be smaller; ``len()`` counts the batches. With
    ``shuffle``, each pass draws a permutation from numpy's global RNG; ``resize`` (int or
    None) resizes each batch to resize x resize (bilinear)."""

    def __init__(self, images, labels, batch_size, shuffle, resize=None):
        self.images = images.astype(np.float32)[:, None, :, :] / 255
        self.labels = labels.astype(np.int32)
        self.batch_size, self.shuffle, self.resize = batch_size, shuffle, resize

    def __iter__(self):
        n = len(self.labels)
        order = np.random.permutation(n) if self.shuffle else np.arange(n)
        for start in range(0, n, self.batch_size):
            idx = order[start:start + self.batch_size]
            X = nd.array(self.images[idx])
            if self.resize is not None:
                X = nd.contrib.BilinearResize2D(X, height=self.resize, width=self.resize)
            yield X, nd.array(self.labels[idx], dtype='int32')


def load_data_fashion_mnist(batch_size, resize=None, root=None, max_examples=None):
    """Fashion-MNIST as a pair of iterators (book 3.5; d2lzh 1.0 signature), the data found,
    verified or downloaded by :func:`d2lzh.data.load_fashion_mnist`.

    Args:
        batch_size (int): positive.
        resize (int or None): positive side length to resize the 28x28 images to.
        root (str or None): folder to search first for the four ``.gz`` files.
        max_examples (int, 'all' or None): keep the first N training and the first N test
            examples; None reads ``$D2LZH_MAX_EXAMPLES``.

    Returns:
        (FashionMNISTIter, FashionMNISTIter): shuffled training and unshuffled test data.

    Raises:
        ValueError: invalid ``batch_size``, ``resize`` or ``max_examples``.
        d2lzh.data.FashionMNISTNotFoundError: no data and no download.
        d2lzh.data.CorruptDataError: a data file fails verification.
    """
    _checks.check_positive_int('batch_size', batch_size)
    _checks.check_positive_int('resize', resize, allow_none=True)
    train_x, train_y, test_x, test_y = _data.load_fashion_mnist(root, max_examples)
    return (FashionMNISTIter(train_x, train_y, batch_size, True, resize),
            FashionMNISTIter(test_x, test_y, batch_size, False, resize))


def choose_max_examples(cpu_default, gpu_available=None):
    """How much of Fashion-MNIST a training cell uses (int, or None for all), said in print:
    :func:`d2lzh.results.choose_max_examples`, with ``gpu_available`` defaulting to whether
    MXNet can run a kernel on a GPU.

    Raises:
        ValueError: ``$D2LZH_MAX_EXAMPLES`` or ``cpu_default`` is invalid.
    """
    if gpu_available is None:
        gpu_available = bool(_working_gpus())
    return _results.choose_max_examples(cpu_default, gpu_available)


def setup_report():
    """Print the versions and the devices this notebook runs with, saying plainly when
    there is no working GPU. Returns None (a setup cell ending with it shows nothing more)."""
    print(f'Python {platform.python_version()}, MXNet {mx.__version__}, numpy {np.__version__}, '
          f'CPU cores: {os.cpu_count()}')
    gpus = [mx.gpu(i) for i in _working_gpus()]
    if gpus:
        names = ', '.join(f'{c} = {gpu_name(c.device_id)}' for c in gpus)
        print(f'可用的 GPU（{len(gpus)} 块）：{names}')
    else:
        print('没有可用的 GPU：本笔记本在 CPU 上运行，需要多个设备的地方用 CPU 上下文 '
              'mx.cpu(0)、mx.cpu(1)… 代替。')
