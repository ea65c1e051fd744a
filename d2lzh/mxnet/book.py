"""The MXNet/Gluon helpers the book's chapters call (d2lzh 1.0 API, plus 8.4's ``lenet``), each
docstring naming its section; importing this module imports MXNet."""
import functools
import os
import platform
import warnings

import numpy as np

from .. import checks as _checks, data as _data
from ..data import choose_max_examples  # noqa: F401  (a book name of this edition)
from ..setup import import_mxnet
from ..setup.cuda11 import no_gpu_warning
from ..setup.gpus import GPUQueryError, query_gpus

mx = import_mxnet()
from mxnet import autograd, gluon, nd  # noqa: E402, F401 (book names)
from mxnet.gluon import nn  # noqa: E402


def gpu_name(i):
    """Name of GPU ``i`` from ``nvidia-smi`` (e.g. 'NVIDIA H100 80GB HBM3'), else 'gpu(i)'."""
    try:
        return query_gpus()[i].name
    except (GPUQueryError, IndexError):
        return f'gpu({i})'


@functools.cache
def _working_gpus():
    """Indices (tuple) of the GPUs where this MXNet build runs a kernel, probed once per process;
    a GPU that fails (an H100 with ``mxnet-cu112``, whose kernels stop at sm_86) gives a warning."""
    count, gpus = mx.context.num_gpus(), []
    if count == 0 and (message := no_gpu_warning()):  # GPU build, no GPU
        warnings.warn(message, RuntimeWarning, stacklevel=3)
    for i in range(count):
        try:
            a = nd.ones((4, 4), ctx=mx.gpu(i))
            total = nd.dot(a, a).sum().asscalar()  # launches a kernel and waits for it
            reason = None if total == 64.0 else f'4x4 矩阵乘积之和是 {total}，不是 64.0'
        except mx.base.MXNetError as err:
            reason = next((ln for ln in str(err).splitlines() if ln.strip()), type(err).__name__)
        if reason is None:
            gpus.append(i)
        else:
            warnings.warn(
                f'GPU {i}（{gpu_name(i)}）在这台机器上，但 MXNet {mx.__version__} 不能在它上面'
                f'运行：{reason}。改用 CPU。mxnet-cu112 只有 sm_50..sm_86（Maxwell 到 Ada，'
                '如 T4、V100、A100、L4）的核函数，没有 Hopper（H100/H200）的；在那里请用'
                ' PyTorch 版。', RuntimeWarning, stacklevel=3)
    return tuple(gpus)


def try_gpu(i=0):
    """Return ``mx.gpu(i)`` (mxnet.Context) if a kernel runs there, else ``mx.cpu()`` (book 4.6)."""
    return mx.gpu(i) if i in _working_gpus() else mx.cpu()


def try_all_gpus():
    """Return every working GPU as a list of contexts, or ``[mx.cpu()]`` (book 8.5)."""
    return [mx.gpu(i) for i in _working_gpus()] or [mx.cpu()]


def try_devices(num):
    """``num`` devices (list of Context) for data-parallel code (8.4/8.5): GPUs when ``num`` work,
    fewer with a RuntimeWarning (:func:`d2lzh.checks.choose_gpus`), none: ``mx.cpu(0) ..
    mx.cpu(num-1)`` (separate devices to MXNet, same cores). ValueError unless ``num`` >= 1."""
    gpus = _checks.choose_gpus(num, _working_gpus(), lambda i: f'gpu({i}) {gpu_name(i)}')
    return [mx.gpu(i) for i in gpus] if gpus else [mx.cpu(i) for i in range(num)]


def describe_devices(devices, num):
    """One Chinese sentence on what code for ``num`` devices runs on, given ``devices =
    try_devices(num)``: GPUs, CPU contexts standing in (no speed-up), or fewer (beyond the book)."""
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
            f'它们共用同一组 CPU 核心和内存，代码路径与多 GPU 相同，'
            f'但没有第二组计算单元（测得的快慢只反映这些核心怎样被分用）。')


class Residual(nn.HybridBlock):
    """ResNet's residual block (book 5.11): two 3x3 convolutions with batch norm (``num_channels``,
    the first with ``strides``), skipped around by the input, through a 1x1 convolution when
    ``use_1x1conv`` (channels or resolution change). float32 (batch, C, H, W) in and out."""

    def __init__(self, num_channels, use_1x1conv=False, strides=1, **kwargs):
        super().__init__(**kwargs)
        self.conv1 = nn.Conv2D(num_channels, kernel_size=3, padding=1, strides=strides)
        self.conv2 = nn.Conv2D(num_channels, kernel_size=3, padding=1)
        self.conv3 = (nn.Conv2D(num_channels, kernel_size=1, strides=strides)
                      if use_1x1conv else None)
        self.bn1, self.bn2 = nn.BatchNorm(), nn.BatchNorm()

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
    """LeNet as 8.4 trains it: conv 3x3 (20)-ReLU-avg pool 2-conv 5x5 (50)-ReLU-avg pool 2-dense
    128-ReLU-dense 10; a HybridSequential, not initialized: (batch, 1, 28, 28) -> (batch, 10)."""
    net = nn.HybridSequential()
    net.add(nn.Conv2D(20, kernel_size=3, activation='relu'), nn.AvgPool2D(pool_size=2, strides=2),
            nn.Conv2D(50, kernel_size=5, activation='relu'), nn.AvgPool2D(pool_size=2, strides=2),
            nn.Dense(128, activation='relu'), nn.Dense(10))
    return net


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
        raise ValueError(f'不能把 {n} 个样本的批量均分到 {k} 个设备上：批量大小要是 {k} 的倍数'
                         + ('' if n < k else '，或者传入 even_split=False，允许各份大小不等'))
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
    """Minibatch SGD in place (book 3.2): each NDArray of ``params`` moves by ``-lr * grad /
    batch_size`` (its ``.grad`` sums over ``batch_size`` examples)."""
    for param in params:
        param[:] = param - lr * param.grad / batch_size


def evaluate_accuracy(data_iter, net, ctx=None):
    """Accuracy (float) of ``net`` (X -> logits) on ``data_iter`` of ``(X, y)`` or DataBatch (X
    float32 (batch, ...), y int labels) (book 3.6, 8.5); each batch split over ``ctx`` (Context
    or list; default CPU); one sync per call. ValueError when ``data_iter`` yields nothing."""
    ctx = [mx.cpu()] if ctx is None else [ctx] if isinstance(ctx, mx.Context) else ctx
    correct, n = nd.zeros((1,), ctx=mx.cpu()), 0
    for batch in data_iter:
        X, y = (batch.data[0], batch.label[0]) if isinstance(batch, mx.io.DataBatch) else batch
        devices = ctx[:X.shape[0]]  # a last batch smaller than the device count
        for Xs, ys in zip(split_and_load(X, devices, even_split=False),
                          split_and_load(y, devices, even_split=False)):
            correct += (net(Xs).argmax(axis=1) == ys.astype('float32')).sum().copyto(mx.cpu())
        n += X.shape[0]
    _checks.check_examples_seen(n)
    return correct.asscalar() / n


class FashionMNISTIter(_data.MinibatchIter):
    """Minibatches of ``images`` (uint8 (N, 28, 28)), ``labels`` (int (N,)) as CPU NDArrays (3.5):
    X float32 (batch, 1, H, W) in [0, 1], y int32; the last may be smaller. ``shuffle``: numpy's
    global RNG, per pass; ``resize`` (int or None): bilinear to resize x resize."""

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
    """Fashion-MNIST (book 3.5) as (shuffled training, test) :class:`FashionMNISTIter`, the data
    of :func:`d2lzh.data.load_fashion_mnist` (``root``: folder searched first; ``max_examples``:
    first N of each, None: ``$D2LZH_MAX_EXAMPLES``; its errors). ValueError unless
    ``batch_size`` and ``resize`` (or None) are positive ints."""
    _checks.check_positive_int('batch_size', batch_size)
    _checks.check_positive_int('resize', resize, allow_none=True)
    train_x, train_y, test_x, test_y = _data.load_fashion_mnist(root, max_examples)
    return (FashionMNISTIter(train_x, train_y, batch_size, True, resize),
            FashionMNISTIter(test_x, test_y, batch_size, False, resize))


def setup_report():
    """Print the versions and devices this notebook runs with, plainly when no GPU works."""
    print(f'Python {platform.python_version()}, MXNet {mx.__version__}, numpy {np.__version__}, '
          f'CPU 核心数：{os.cpu_count()}')
    if gpus := _working_gpus():
        print(f'可用的 GPU（{len(gpus)} 块）：' + ', '.join(f'gpu({i}) = {gpu_name(i)}' for i in gpus))
    else:
        print('没有可用的 GPU：本笔记本在 CPU 上运行，需要多个设备的地方用 CPU 上下文 '
              'mx.cpu(0)、mx.cpu(1)… 代替。')
