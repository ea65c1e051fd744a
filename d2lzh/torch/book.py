"""The book's API in PyTorch: devices (4.6), models (LeNet of 8.4, ResNet-18 of 5.11 and
8.5), the data-parallel helpers of 8.4 and ``evaluate_accuracy`` (3.6); the argument
checks are those of :mod:`d2lzh.checks`, as in the MXNet edition."""
import os

import torch
import torch.nn.functional as F
from torch import nn

from .. import checks as _checks

__all__ = ['num_gpus', 'gpu_name', 'try_gpu', 'try_all_gpus', 'try_devices', 'synchronize',
           'lenet', 'Residual', 'resnet18', 'split_and_load', 'allreduce', 'get_params', 'sgd',
           'CUDAGraphReplica', 'evaluate_accuracy', 'setup_report']


def num_gpus():
    """Number of CUDA GPUs PyTorch can use (0 with a CPU build or no driver)."""
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def gpu_name(i):
    """Name of GPU ``i``, e.g. 'NVIDIA H100 80GB HBM3'."""
    return torch.cuda.get_device_name(i)


def try_gpu(i=0):
    """Return ``torch.device('cuda:i')`` if that GPU exists, else the CPU (book 4.6)."""
    return torch.device(f'cuda:{i}') if num_gpus() > i else torch.device('cpu')


def try_all_gpus():
    """Every GPU as a list of devices, or ``[torch.device('cpu')]`` (book 8.5)."""
    return [torch.device(f'cuda:{i}') for i in range(num_gpus())] or [torch.device('cpu')]


def try_devices(num):
    """``num`` devices for data-parallel code (8.4, 8.5) by :func:`d2lzh.checks.choose_gpus`'s
    rule (its errors and warning); with no GPU, the CPU ``num`` times (the multi-device code
    runs unchanged, on the same cores)."""
    gpus = _checks.choose_gpus(num, range(num_gpus()), lambda i: f'cuda:{i} ({gpu_name(i)})')
    return [torch.device(f'cuda:{i}') for i in gpus] if gpus else [torch.device('cpu')] * num


def synchronize(device=None):
    """Wait for the work queued on ``device`` (default: the current CUDA device); a no-op
    on the CPU, where PyTorch runs operators synchronously."""
    if torch.device(device or 'cuda').type == 'cuda' and torch.cuda.is_available():
        torch.cuda.synchronize(device)


def lenet():
    """LeNet of section 8.4, layer for layer :func:`d2lzh.mxnet.lenet`: float32 (batch, 1, 28,
    28) -> logits (batch, 10). No batch norm: N processes on minibatches of B compute as one."""
    return nn.Sequential(nn.Conv2d(1, 20, kernel_size=3), nn.ReLU(), nn.AvgPool2d(2),
                         nn.Conv2d(20, 50, kernel_size=5), nn.ReLU(), nn.AvgPool2d(2),
                         nn.Flatten(), nn.Linear(50 * 4 * 4, 128), nn.ReLU(), nn.Linear(128, 10))


class Residual(nn.Module):
    """ResNet's residual block (book 5.11) as :class:`d2lzh.mxnet.Residual`, from
    ``in_channels``: float (batch, in_channels, H, W) -> (batch, num_channels, H', W').
    ``conv_bias=False``: no bias in the two 3x3 convolutions, which a batch norm follows."""

    def __init__(self, in_channels, num_channels, use_1x1conv=False, strides=1, conv_bias=True):
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, num_channels, 3, padding=1, stride=strides,
                               bias=conv_bias)
        self.conv2 = nn.Conv2d(num_channels, num_channels, 3, padding=1, bias=conv_bias)
        self.conv3 = nn.Conv2d(in_channels, num_channels, 1, stride=strides) \
            if use_1x1conv else None
        self.bn1, self.bn2 = nn.BatchNorm2d(num_channels), nn.BatchNorm2d(num_channels)

    def forward(self, X):
        Y = F.relu(self.bn1(self.conv1(X)))
        Y = self.bn2(self.conv2(Y))
        shortcut = self.conv3(X) if self.conv3 is not None else X
        return F.relu(Y + shortcut)


def resnet18(num_classes, in_channels=1, conv_bias=True):
    """ResNet-18 of chapter 8.5 as :func:`d2lzh.mxnet.resnet18` (3x3 stem, no max pooling):
    float (batch, in_channels, H, W) -> logits (batch, num_classes).

    ``conv_bias=False`` (beyond the book; notebook 07) leaves out the bias of the 17
    convolutions that a batch norm follows (all but the three 1x1 shortcuts): in training
    the batch norm subtracts each channel's batch mean, which removes a per-channel constant,
    so the network computes the same functions with 3,904 fewer parameters and 17 fewer
    bias kernels in each of the forward and backward passes."""
    layers = [nn.Conv2d(in_channels, 64, kernel_size=3, padding=1, bias=conv_bias),
              nn.BatchNorm2d(64), nn.ReLU()]
    for c_in, c in [(64, 64), (64, 128), (128, 256), (256, 512)]:  # halve H and W from 2nd
        layers += [Residual(c_in, c, use_1x1conv=c != c_in, strides=1 if c == c_in else 2,
                            conv_bias=conv_bias), Residual(c, c, conv_bias=conv_bias)]
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(512, num_classes)]
    return nn.Sequential(*layers)


def split_and_load(data, devices, even_split=True):
    """Split a batch along its first axis into ``len(devices)`` slices and
    copy slice i to ``devices[i]`` (book 8.4).

    Args:
        data (torch.Tensor or numpy.ndarray): the batch, (n, ...).
        devices (list of torch.device): one per slice.
        even_split (bool): require equal slices; with False, slice sizes
            differ by at most one.

    Returns:
        list of torch.Tensor

    Raises:
        ValueError: ``even_split`` and n is not a multiple of the device
            count, or n is smaller than the device count.
    """
    if not isinstance(data, torch.Tensor):
        data = torch.as_tensor(data)
    n, k = data.shape[0], len(devices)
    if n < k or (even_split and n % k != 0):
        raise ValueError(f'不能把 {n} 个样本的批量均分到 {k} 个设备上：批量大小要是 {k} 的倍数'
                         + ('' if n < k else '，或者传入 even_split=False，允许各份大小不等'))
    bounds = [i * n // k for i in range(k + 1)]
    return [data[bounds[i]:bounds[i + 1]].to(dev, non_blocking=True)
            for i, dev in enumerate(devices)]


def allreduce(data):
    """Sum tensors held on different devices and write the sum into every
    one of them, in place (book 8.4).

    The results are written with ``copy_`` into the existing tensors, so
    every device's tensor (e.g. a parameter's ``.grad``) really changes;
    rebinding a list element would leave the devices untouched.

    Args:
        data (list of torch.Tensor): same shape, one per device.
    """
    for i in range(1, len(data)):
        data[0].add_(data[i].to(data[0].device))
    for i in range(1, len(data)):
        data[i].copy_(data[0].to(data[i].device))


def get_params(params, device):
    """Copy parameters to ``device`` as new leaf tensors that require grad (book 8.4)."""
    return [p.detach().to(device).clone().requires_grad_(True) for p in params]


def sgd(params, lr, batch_size):
    """Minibatch SGD in place on ``params`` (leaves whose ``.grad`` sums ``batch_size``
    examples' gradients) at rate ``lr``; then zero the gradients (book 3.2)."""
    with torch.no_grad():
        for p in params:
            p -= lr * p.grad / batch_size
            p.grad.zero_()


class CUDAGraphReplica:
    """One device's share of a data-parallel SGD step (8.4) as two CUDA graphs, so that
    Python launches it with one call instead of one per operator (beyond the book; 8.1, 8.2).

    ``backward(X, y)`` copies the shard into the static inputs and replays the forward and
    backward pass, which writes ``loss`` (0-d) and ``grad`` (1-d: every parameter's gradient,
    flattened and concatenated); ``update()`` replays ``p -= lr * grad / batch_size`` (as
    :func:`sgd`). Between the two, sum ``grad`` over the devices in place (:func:`allreduce`).
    As PyTorch's CUDA graph notes require, eager warm-up runs go first on a side stream of
    this device, and both captures use that stream.

    Args:
        loss_fn: (X, y) -> 0-d loss summed over the examples, computed from ``params``.
        params (list of torch.Tensor): leaves on one CUDA device that require grad.
        X, y: a shard of the shape every step uses, on that device.
        lr (float), batch_size (int): the whole minibatch over all devices, as in ``sgd``.
        warmup (int): eager forward and backward passes before capture.

    Raises:
        RuntimeError: ``params`` are not on a CUDA device (CUDA graphs need a GPU).
    """

    def __init__(self, loss_fn, params, X, y, lr, batch_size, warmup=3):
        device = params[0].device
        if device.type != 'cuda':
            raise RuntimeError(f'CUDA 图需要 CUDA 设备，参数却在 {device} 上：请把模型移到 GPU')
        self.X, self.y = X.clone(), y.clone()
        side = torch.cuda.Stream(device)
        side.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(side):
            for _ in range(warmup):  # cuDNN/cuBLAS set-up and allocations happen here
                loss_fn(self.X, self.y).backward()
        torch.cuda.current_stream(device).wait_stream(side)
        for p in params:
            p.grad = None  # backward in the capture allocates .grad from the graph's pool
        self.graphs = torch.cuda.CUDAGraph(), torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graphs[0], stream=side):
            loss = loss_fn(self.X, self.y)
            loss.backward()
            self.loss = loss.detach()
            self.grad = torch.cat([p.grad.reshape(-1) for p in params])
        with torch.cuda.graph(self.graphs[1], stream=side), torch.no_grad():
            for p, g in zip(params, self.grad.split([p.numel() for p in params])):
                p.sub_(g.view_as(p), alpha=lr / batch_size)

    def backward(self, X, y):
        """Forward and backward on this shard: fills ``loss`` and ``grad``."""
        self.X.copy_(X, non_blocking=True)
        self.y.copy_(y, non_blocking=True)
        self.graphs[0].replay()

    def update(self):
        """The SGD update of the parameters from ``grad``."""
        self.graphs[1].replay()


def evaluate_accuracy(data_iter, net, device=None):
    """Accuracy in [0, 1] of ``net`` (X -> logits) on the ``(X, y)`` of ``data_iter`` (book
    3.6, 8.5), computed on ``device`` (a list: its first; default: that of net's first
    parameter, else the CPU), an ``nn.Module`` in eval mode (then its mode restored), with
    one synchronisation at the end. ValueError: ``data_iter`` yields no example."""
    module = isinstance(net, nn.Module)
    device = device[0] if isinstance(device, (list, tuple)) else device
    if device is None:
        device = next((p.device for p in net.parameters()), 'cpu') if module else 'cpu'
    device, was_training = torch.device(device), module and net.training
    if module:
        net.eval()
    correct, n = torch.zeros((), dtype=torch.int64, device=device), 0
    try:
        with torch.no_grad():
            for X, y in data_iter:
                X, y = X.to(device, non_blocking=True), y.to(device, non_blocking=True)
                correct += (net(X).argmax(dim=1) == y).sum()
                n += y.shape[0]
    finally:
        if was_training:
            net.train()
    _checks.check_examples_seen(n)
    return correct.item() / n


def setup_report():
    """Print the versions and GPUs this notebook runs with, and plainly when there is none."""
    import platform
    cuda = torch.version.cuda or '无（CPU 版）'
    print(f'Python {platform.python_version()}, PyTorch {torch.__version__}, CUDA {cuda}, '
          f'CPU 核心数：{os.cpu_count()}')
    if num_gpus():
        names = ', '.join(f'cuda:{i} = {gpu_name(i)}' for i in range(num_gpus()))
        print(f'可用的 GPU（{num_gpus()} 块）：{names}')
    else:
        print('没有可用的 GPU：本笔记本在 CPU 上运行，需要 GPU 的地方由 CPU 代替，'
              '多 GPU 的代码路径同样能跑通，但不会更快。')
