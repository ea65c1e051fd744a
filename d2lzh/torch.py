"""The PyTorch twin of :mod:`d2lzh.mxnet`: the same names, PyTorch semantics.

``from d2lzh import torch as d2l`` gives ``Benchmark``, ``try_gpu``,
``try_all_gpus``, ``try_devices``, ``Residual``, ``resnet18``,
``evaluate_accuracy``, ``load_data_fashion_mnist``, ``split_and_load``,
``allreduce``, ``get_params``, ``sgd``, the training loops used by the
notebooks (``train``, ``train_data_parallel``) and the DistributedDataParallel
launcher ``run_ddp`` with its worker. The data comes from :mod:`d2lzh.data`
(same search order, verification and ``$D2LZH_MAX_EXAMPLES``); torchvision is
not needed. PyTorch >= 2.4 is supported; it is an optional extra of d2lzh.

Devices: a ``torch.device``. Where the book asks for several GPUs and the
machine has none, the CPU stands in (``try_devices(2)`` gives the CPU twice).
"""
import json
import math
import os
import socket
import sys
import tempfile
import time
import traceback
import warnings
from datetime import timedelta

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from . import data as _data
from .plot import bar_chart, set_figsize  # noqa: F401  (part of this module's API)
from .results import record  # noqa: F401
from .timing import Benchmark, Timer  # noqa: F401

__all__ = ['torch', 'nn', 'F', 'Benchmark', 'Timer', 'record', 'bar_chart', 'set_figsize', 'gpu_name', 'num_gpus', 'try_gpu',
           'try_all_gpus', 'try_devices', 'synchronize', 'Residual', 'resnet18',
           'split_and_load', 'allreduce', 'get_params', 'sgd', 'evaluate_accuracy',
           'FashionMNISTIter', 'load_data_fashion_mnist', 'choose_max_examples', 'train',
           'train_data_parallel', 'run_ddp', 'ddp_worker', 'setup_report']


# ---------------------------------------------------------------- devices (4.6)

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
    """Return ``num`` devices for data-parallel code (chapter 8.4/8.5).

    The first ``num`` GPUs when the machine has that many. With no GPU at all,
    the CPU stands in for each device (``[cpu, cpu, ...]``): the multi-device
    code path runs unchanged, on the same cores.

    Args:
        num (int): how many devices, >= 1.

    Returns:
        list of torch.device

    Raises:
        ValueError: ``num`` is not a positive int, or the machine has some
            GPUs but fewer than ``num`` (the message names them).
    """
    if isinstance(num, bool) or not isinstance(num, (int, np.integer)) or num < 1:
        raise ValueError(f'num={num!r}: ask for a positive whole number of devices')
    have = num_gpus()
    if have == 0:
        return [torch.device('cpu')] * num
    if have < num:
        names = ', '.join(f'cuda:{i} ({gpu_name(i)})' for i in range(have))
        raise ValueError(f'asked for {num} GPUs but this machine has {have}: {names}. '
                         f'Ask for at most {have}, or run on a machine with {num} GPUs.')
    return [torch.device(f'cuda:{i}') for i in range(num)]


def synchronize(device=None):
    """Wait until all queued work on ``device`` (a CUDA device) has finished.

    A no-op for the CPU, whose operators PyTorch runs synchronously.
    """
    device = torch.device(device) if device is not None else None
    if device is None:
        if torch.cuda.is_available():
            torch.cuda.synchronize()
    elif device.type == 'cuda':
        torch.cuda.synchronize(device)


# ----------------------------------------------------------------- models (5.11, 8.5)

class Residual(nn.Module):
    """The residual block of ResNet (book 5.11), PyTorch version.

    Two 3x3 convolutions with batch norm; the input skips around them, through
    a 1x1 convolution when ``use_1x1conv``. Input/output float (batch, C, H, W).

    Args:
        in_channels (int): input channels.
        num_channels (int): output channels.
        use_1x1conv (bool): project the shortcut with a 1x1 convolution.
        strides (int): stride of the first convolution.
    """

    def __init__(self, in_channels, num_channels, use_1x1conv=False, strides=1):
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, num_channels, 3, padding=1, stride=strides)
        self.conv2 = nn.Conv2d(num_channels, num_channels, 3, padding=1)
        self.conv3 = (nn.Conv2d(in_channels, num_channels, 1, stride=strides)
                      if use_1x1conv else None)
        self.bn1 = nn.BatchNorm2d(num_channels)
        self.bn2 = nn.BatchNorm2d(num_channels)

    def forward(self, X):
        Y = F.relu(self.bn1(self.conv1(X)))
        Y = self.bn2(self.conv2(Y))
        shortcut = self.conv3(X) if self.conv3 is not None else X
        return F.relu(Y + shortcut)


def resnet18(num_classes, in_channels=1):
    """ResNet-18 as in chapter 8.5 (3x3 stride-1 stem, no max pooling, four
    stages of two residual blocks, global average pooling, linear layer).

    Args:
        num_classes (int): outputs.
        in_channels (int): input channels (1 for Fashion-MNIST).

    Returns:
        torch.nn.Sequential: float (batch, in_channels, H, W) -> logits
        (batch, num_classes).
    """
    layers = [nn.Conv2d(in_channels, 64, kernel_size=3, stride=1, padding=1),
              nn.BatchNorm2d(64), nn.ReLU()]
    channels_in = 64
    for stage, channels in enumerate([64, 128, 256, 512]):
        for i in range(2):
            downsample = stage > 0 and i == 0
            layers.append(Residual(channels_in, channels, use_1x1conv=downsample,
                                   strides=2 if downsample else 1))
            channels_in = channels
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(512, num_classes)]
    return nn.Sequential(*layers)


# -------------------------------------------------- data parallelism helpers (8.4)

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
        raise ValueError(
            f'cannot split a batch of {n} examples evenly over {k} devices: use a batch '
            f'size that is a multiple of {k}'
            + ('' if n < k else ', or pass even_split=False to allow unequal slices'))
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
    """Minibatch SGD, in place, then zero the gradients (book 3.2).

    Args:
        params (list of torch.Tensor): leaf tensors with ``.grad``.
        lr (float): learning rate.
        batch_size (int): the gradients are sums over this many examples.
    """
    with torch.no_grad():
        for p in params:
            p -= lr * p.grad / batch_size
            p.grad.zero_()


# ------------------------------------------------------------- evaluation (3.6)

def evaluate_accuracy(data_iter, net, device=None):
    """Classification accuracy of ``net`` on ``data_iter`` (book 3.6, 8.5).

    Puts an ``nn.Module`` in eval mode for the pass and restores its mode.
    Counts stay on the device until the end: one synchronisation.

    Args:
        data_iter: iterable of ``(X, y)``; X float (batch, ...), y int (batch,).
        net (callable): X -> logits (batch, num_classes).
        device (torch.device, str or list or None): where to compute; a list
            uses its first device; default: the device of net's first
            parameter, else the CPU.

    Returns:
        float: accuracy in [0, 1].

    Raises:
        ValueError: ``data_iter`` yields no example.
    """
    if isinstance(device, (list, tuple)):
        device = device[0]
    if device is None:
        first = next(net.parameters(), None) if isinstance(net, nn.Module) else None
        device = first.device if first is not None else torch.device('cpu')
    device = torch.device(device)
    was_training = isinstance(net, nn.Module) and net.training
    if isinstance(net, nn.Module):
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
    if n == 0:
        raise ValueError('evaluate_accuracy: data_iter yielded no examples')
    return correct.item() / n


# ---------------------------------------------------------------- data (3.5)

class FashionMNISTIter(_data.MinibatchIter):
    """Minibatches of Fashion-MNIST as torch tensors (book 3.5).

    Yields ``(X, y)``: X float32 (batch, 1, H, W) in [0, 1], y int64 (batch,).
    The last batch may be smaller; ``len()`` is the number of batches.

    Where the data lives is the point of chapter 8's PyTorch notebooks:

    * ``device=None`` (the book's way): float32 batches are cut on the host
      and the training loop copies each one to the GPU;
    * ``pin_memory=True``: the same, from page-locked (pinned) host memory,
      so the loop's ``X.to('cuda', non_blocking=True)`` returns at once and
      the copy can overlap computation. The data set is pinned once; with
      shuffling, each pass first gathers the whole shuffled epoch into a
      second pinned buffer (one ``index_select``), so every batch is a slice
      of pinned memory and nothing is pinned per batch. Before that buffer
      is refilled, the iterator waits for a CUDA event recorded when the
      previous pass ended, so copies still queued from it read their data.
      Those batches are views of that buffer: ``.clone()`` one to keep it
      past the next pass;
    * ``device='cuda'``: the whole data set is kept on the GPU as uint8 (47 MB
      for Fashion-MNIST), and batches are shuffled, cut and scaled there: no
      host-to-device copy per batch at all.

    Shuffling uses ``torch.randperm`` (seed with ``torch.manual_seed``).

    Args:
        images (numpy.ndarray): uint8 (N, 28, 28).
        labels (numpy.ndarray): int (N,).
        batch_size (int): examples per batch.
        shuffle (bool): new order every pass.
        resize (int or None): bilinear resize to resize x resize per batch.
        device (torch.device, str or None): keep the data on this device.
        pin_memory (bool): keep host data in pinned memory (ignored without
            CUDA or with ``device``); costs 2x the float32 data set in pinned
            host memory when shuffling (376 MB for Fashion-MNIST).
    """

    def __init__(self, images, labels, batch_size, shuffle, resize=None, device=None,
                 pin_memory=False):
        self.batch_size, self.shuffle, self.resize = batch_size, shuffle, resize
        self.device = torch.device(device) if device is not None else torch.device('cpu')
        X = torch.tensor(images, dtype=torch.uint8).unsqueeze(1)
        self.labels = torch.from_numpy(labels.astype(np.int64))
        self.pin_memory = bool(pin_memory) and torch.cuda.is_available() and \
            self.device.type == 'cpu'
        if self.device.type == 'cpu':
            X = X.float().div_(255)  # convert once; batches are views
        else:
            X, self.labels = X.to(self.device), self.labels.to(self.device)
        self.images = X
        self._epoch_buffers = self._pass_done = None
        if self.pin_memory:
            self.images, self.labels = self.images.pin_memory(), self.labels.pin_memory()
            if shuffle:
                self._epoch_buffers = (torch.empty_like(self.images).pin_memory(),
                                       torch.empty_like(self.labels).pin_memory())

    def _order(self):
        """This pass's (images, labels, index or None): batches are cut from
        the first two, through the index when it is not None."""
        n = len(self.labels)
        if not self.shuffle:
            return self.images, self.labels, None
        order = torch.randperm(n, device=self.device)
        if self._epoch_buffers is None:
            return self.images, self.labels, order
        if self._pass_done is not None:
            self._pass_done.synchronize()  # copies queued from the last pass are done
        X, y = self._epoch_buffers
        torch.index_select(self.images, 0, order, out=X)
        torch.index_select(self.labels, 0, order, out=y)
        return X, y, None

    def __iter__(self):
        images, labels, order = self._order()
        try:
            for start in range(0, len(labels), self.batch_size):
                if order is None:
                    X = images[start:start + self.batch_size]
                    y = labels[start:start + self.batch_size]
                else:
                    idx = order[start:start + self.batch_size]
                    X, y = images[idx], labels[idx]
                if X.dtype == torch.uint8:
                    X = X.float().div_(255)
                if self.resize is not None:
                    X = F.interpolate(X, size=(self.resize, self.resize), mode='bilinear',
                                      align_corners=False)
                yield X, y
        finally:
            if self._epoch_buffers is not None:  # the consumer has queued its copies
                self._pass_done = torch.cuda.Event()
                self._pass_done.record()


def load_data_fashion_mnist(batch_size, resize=None, root=None, max_examples=None,
                            device=None, pin_memory=False):
    """Fashion-MNIST as a pair of iterators (book 3.5), without torchvision.

    Args:
        batch_size (int): positive.
        resize (int or None): positive side length to resize the images to.
        root (str or None): folder searched first (see :mod:`d2lzh.data`).
        max_examples (int, 'all' or None): first N training and N test
            examples; None reads ``$D2LZH_MAX_EXAMPLES``.
        device (torch.device, str or None): keep the data set on this device
            (see :class:`FashionMNISTIter`).
        pin_memory (bool): keep host batches in pinned memory.

    Returns:
        (FashionMNISTIter, FashionMNISTIter): shuffled training data, test data.

    Raises:
        ValueError: invalid ``batch_size``, ``resize`` or ``max_examples``.
        d2lzh.data.FashionMNISTNotFoundError, d2lzh.data.CorruptDataError:
            see :func:`d2lzh.data.load_fashion_mnist`.
    """
    _data.check_positive_int('batch_size', batch_size)
    _data.check_positive_int('resize', resize, allow_none=True)
    train_x, train_y, test_x, test_y = _data.load_fashion_mnist(root, max_examples)
    return (FashionMNISTIter(train_x, train_y, batch_size, True, resize, device, pin_memory),
            FashionMNISTIter(test_x, test_y, batch_size, False, resize, device, pin_memory))


def choose_max_examples(cpu_default, gpu_available=None):
    """How much of Fashion-MNIST to train on; prints the choice (see
    :func:`d2lzh.data.choose_max_examples`). ``gpu_available`` defaults to
    whether PyTorch sees a GPU."""
    if gpu_available is None:
        gpu_available = num_gpus() > 0
    return _data.choose_max_examples(cpu_default, gpu_available)


# ------------------------------------------------------------- training (8.5)

def _autocast(device, amp, cache_enabled=True):
    enabled = bool(amp) and torch.device(device).type == 'cuda'
    if not enabled:
        return torch.autocast(device_type='cpu', enabled=False)
    return torch.autocast(device_type='cuda', dtype=torch.bfloat16, cache_enabled=cache_enabled)


def _lr_factor(schedule, epoch, num_epochs):
    if schedule is None:
        return 1.0
    if schedule == 'cosine':  # one value per epoch, from 1 down towards 0
        return 0.5 * (1 + math.cos(math.pi * epoch / num_epochs))
    raise ValueError(f"lr_schedule={schedule!r} is not valid: use None or 'cosine'")


_CAPTURE_STREAMS = {}  # one side stream per device for warm-up and every capture


def _capture_stream(device):
    """The side stream of ``device`` on which eager warm-up steps run and
    CUDA graphs are recorded, made on first use; it first waits for the
    work already queued on the device's current stream."""
    if device not in _CAPTURE_STREAMS:
        _CAPTURE_STREAMS[device] = torch.cuda.Stream(device=device)
    stream = _CAPTURE_STREAMS[device]
    stream.wait_stream(torch.cuda.current_stream(device))
    return stream


def _capture_step(model, loss_fn, optimizer, X, y, amp, warmup, warmup_steps=3):
    """Record one whole training step (forward, backward, SGD update) as a
    CUDA graph on the static inputs ``X``, ``y``; return (graph, loss tensor).

    Replaying the graph launches all of the step's kernels at once, with no
    Python or launch overhead. ``warmup`` first runs ``warmup_steps`` eager
    steps on the stream that then records the graph (cuDNN picks its
    algorithms, the optimizer creates its state, DDP builds its buckets), as
    the CUDA-graph documentation asks; they are real updates on this batch.
    """
    stream = _capture_stream(X.device)
    if warmup:
        with torch.cuda.stream(stream):
            for _ in range(warmup_steps):
                optimizer.zero_grad(set_to_none=True)
                with _autocast(X.device, amp, cache_enabled=False):
                    loss = loss_fn(model(X), y)
                loss.backward()
                optimizer.step()
            del loss  # keeps no autograd node of an eager step alive into the capture
    graph = torch.cuda.CUDAGraph()
    optimizer.zero_grad(set_to_none=True)
    with torch.cuda.graph(graph, stream=stream):
        with _autocast(X.device, amp, cache_enabled=False):
            loss = loss_fn(model(X), y)
        loss.backward()
        optimizer.step()
    torch.cuda.current_stream(X.device).wait_stream(stream)
    return graph, loss


def train(net, train_iter, test_iter, num_epochs, lr, device, amp=False,
          channels_last=False, compile_model=False, cuda_graph=False, momentum=0.0,
          weight_decay=0.0, lr_schedule=None, verbose=True):
    """Train a classifier with SGD and cross-entropy on one device (book 8.5).

    With the defaults this is the book's loop: fp32, plain SGD at a constant
    learning rate, one Python-driven step per batch. The options add the
    techniques of the notebook "在现代GPU上把训练跑满". Each epoch is timed from
    its first batch to a synchronisation after its last; the test-set
    evaluation after it is timed separately.

    Args:
        net (nn.Module): the model; moved to ``device``.
        train_iter, test_iter: iterables of ``(X, y)`` (on the host or on
            ``device``; host batches are copied with ``non_blocking=True``).
        num_epochs (int): passes over ``train_iter``.
        lr (float): (peak) learning rate.
        device (torch.device or str): where to train.
        amp (bool): bf16 autocast (CUDA only; ignored on the CPU).
        channels_last (bool): NHWC memory format for the model and inputs.
        compile_model (bool): ``torch.compile`` the model (the first epoch
            then includes compilation).
        cuda_graph (bool): record the whole training step as a CUDA graph and
            replay it for every full batch (CUDA only). A last batch smaller
            than the first one is skipped (and not counted) in this mode.
            With ``compile_model`` as well, the graph records the compiled
            model (compilation happens in the eager warm-up steps before the
            first capture): the fastest path of the notebooks. A learning
            rate that changes between epochs means one new capture per epoch.
            If a capture fails, a RuntimeWarning names the cause and
            training goes on with eager steps.
        momentum (float): SGD momentum.
        weight_decay (float): SGD weight decay.
        lr_schedule (None or 'cosine'): constant, or cosine decay with one
            learning rate per epoch.
        verbose (bool): print one line per epoch.

    Returns:
        dict: ``epoch_times`` (s), ``eval_times`` (s), ``test_acc`` and
        ``train_loss`` (per epoch), ``examples`` (trained on per epoch),
        ``images_per_s`` (fastest epoch).

    Raises:
        ValueError: unknown ``lr_schedule``.
    """
    device = torch.device(device)
    _lr_factor(lr_schedule, 0, num_epochs)  # validate early
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    net = net.to(device, memory_format=fmt)
    model = torch.compile(net) if compile_model else net
    optimizer = torch.optim.SGD(net.parameters(), lr=lr, momentum=momentum,
                                weight_decay=weight_decay)
    loss_fn = nn.CrossEntropyLoss()
    use_graph = bool(cuda_graph) and device.type == 'cuda'
    graph = static = None
    history = {'epoch_times': [], 'eval_times': [], 'test_acc': [], 'train_loss': []}
    examples = 0
    for epoch in range(num_epochs):
        new_lr = lr * _lr_factor(lr_schedule, epoch, num_epochs)
        if new_lr != optimizer.param_groups[0]['lr']:
            graph = None  # the learning rate is baked into a recorded graph
        for group in optimizer.param_groups:
            group['lr'] = new_lr
        net.train()
        synchronize(device)
        start = time.perf_counter()
        total_loss = torch.zeros((), device=device)
        examples = 0
        for X, y in train_iter:
            X = X.to(device, non_blocking=True, memory_format=fmt)
            y = y.to(device, non_blocking=True)
            if use_graph:
                if static is None:
                    static = (X.clone(memory_format=fmt), y.clone())
                if X.shape != static[0].shape:
                    continue  # a smaller last batch cannot replay the graph
                static[0].copy_(X)
                static[1].copy_(y)
                if graph is None:
                    try:
                        graph, loss = _capture_step(model, loss_fn, optimizer, *static, amp,
                                                    warmup=epoch == 0 and examples == 0)
                    except RuntimeError as err:  # e.g. an op that cannot be captured
                        warnings.warn(f'cuda_graph=True: capturing the training step failed '
                                      f'({err}); continuing without a CUDA graph',
                                      RuntimeWarning, stacklevel=2)
                        use_graph = False
                        torch.cuda.synchronize(device)
                        optimizer.zero_grad(set_to_none=True)
                        continue
                graph.replay()
            else:
                with _autocast(device, amp):
                    loss = loss_fn(model(X), y)
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()
            total_loss += loss.detach() * y.shape[0]
            examples += y.shape[0]
        synchronize(device)
        history['epoch_times'].append(time.perf_counter() - start)
        start = time.perf_counter()
        with _autocast(device, amp):
            acc = evaluate_accuracy(test_iter, model, device)
        history['eval_times'].append(time.perf_counter() - start)
        history['test_acc'].append(acc)
        history['train_loss'].append(total_loss.item() / max(examples, 1))
        if verbose:
            print(f'epoch {epoch + 1}: loss {history["train_loss"][-1]:.3f}, test acc '
                  f'{acc:.3f}, {history["epoch_times"][-1]:.2f} s '
                  f'({examples / history["epoch_times"][-1]:.0f} images/s)')
    history['examples'] = examples
    history['images_per_s'] = examples / min(history['epoch_times'])
    return history


def train_data_parallel(net, train_iter, test_iter, num_epochs, lr, devices, verbose=True):
    """Train with ``nn.DataParallel`` over ``devices`` (one process, threads).

    Every step, DataParallel copies the parameters from the first GPU to the
    others, splits the batch, runs the replicas in threads, and gathers the
    outputs on the first GPU: all from one Python process. With one device,
    or on the CPU, it simply calls the model.

    Args: as :func:`train`, with ``devices`` (list of torch.device).

    Returns:
        dict: as :func:`train`.
    """
    ids = [d.index for d in devices if d.type == 'cuda']
    model = nn.DataParallel(net.to(devices[0]), device_ids=ids) if len(ids) > 1 else \
        net.to(devices[0])
    return train(model, train_iter, test_iter, num_epochs, lr, devices[0], verbose=verbose)


# ------------------------------------------------- DistributedDataParallel (8.5)

def _free_port():
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


def ddp_worker(rank, world_size, port, config, out_dir):
    """One process of :func:`run_ddp`: trains ResNet-18 on its shard of the data.

    Each of the ``world_size`` processes drives one GPU (or the CPU, with the
    gloo backend), keeps its own replica of the model, and sees
    ``batch_size`` examples per step; DistributedDataParallel all-reduces the
    gradients (NCCL on GPUs) while the backward pass is still running. Rank 0
    evaluates on the test set after every epoch and writes ``result.json``.
    A failure writes ``error-<rank>.txt`` with the traceback.

    Args:
        rank (int): this process, 0 <= rank < world_size.
        world_size (int): number of processes.
        port (int): TCP port of the rendezvous on 127.0.0.1.
        config (dict): see :func:`run_ddp`.
        out_dir (str): folder for result and error files.
    """
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    warnings.filterwarnings('ignore', message=r'barrier\(\): using the device')
    warnings.filterwarnings('ignore', message='Grad strides do not match bucket view')
    try:
        use_cuda = config['backend'] == 'nccl'
        device = torch.device(f'cuda:{rank}') if use_cuda else torch.device('cpu')
        if use_cuda:
            torch.cuda.set_device(device)
        else:
            torch.set_num_threads(max(1, (os.cpu_count() or 1) // world_size))
        if config.get('cuda_graph'):  # NCCL calls inside a CUDA graph need this off
            os.environ['TORCH_NCCL_ASYNC_ERROR_HANDLING'] = '0'
        dist.init_process_group(config['backend'], init_method=f'tcp://127.0.0.1:{port}',
                                rank=rank, world_size=world_size,
                                timeout=timedelta(seconds=config['timeout']))
        if config.get('fail_rank') == rank:
            raise RuntimeError(f'rank {rank} was asked to fail (fail_rank={rank})')
        torch.manual_seed(config['seed'])
        train_x, train_y, test_x, test_y = _data.load_fashion_mnist(
            max_examples=config['max_examples'] or 'all', progress=False)
        X = torch.tensor(train_x, dtype=torch.uint8).unsqueeze(1).to(device)
        Y = torch.from_numpy(train_y.astype(np.int64)).to(device)
        fmt = torch.channels_last if config['channels_last'] else torch.contiguous_format
        net = resnet18(10).to(device, memory_format=fmt)
        use_graph = bool(config.get('cuda_graph')) and use_cuda
        # With a graph, DDP must be built on the stream that later records it
        # (torch.cuda.stream(None) changes nothing).
        stream = _capture_stream(device) if use_graph else None
        with torch.cuda.stream(stream):
            model = DistributedDataParallel(
                net, device_ids=[rank] if use_cuda else None,
                gradient_as_bucket_view=config.get('gradient_as_bucket_view', True))
        if stream is not None:
            torch.cuda.current_stream(device).wait_stream(stream)
        optimizer = torch.optim.SGD(model.parameters(), lr=config['lr'],
                                    momentum=config['momentum'],
                                    weight_decay=config['weight_decay'])
        loss_fn = nn.CrossEntropyLoss()
        test_iter = FashionMNISTIter(test_x, test_y, 512, False, device=device)
        per_rank = len(Y) // world_size
        bs = config['batch_size']
        history = {'epoch_times': [], 'test_acc': [], 'world_size': world_size,
                   'backend': config['backend'], 'cuda_graph': use_graph,
                   'device': gpu_name(rank) if use_cuda else 'cpu'}
        graph = static = None
        examples = 0
        for epoch in range(config['num_epochs']):
            new_lr = config['lr'] * _lr_factor(config['lr_schedule'], epoch,
                                               config['num_epochs'])
            if new_lr != optimizer.param_groups[0]['lr']:
                graph = None  # the learning rate is baked into a recorded graph
            for group in optimizer.param_groups:
                group['lr'] = new_lr
            g = torch.Generator().manual_seed(config['seed'] + epoch)  # same on every rank
            shard = torch.randperm(len(Y), generator=g)[rank * per_rank:(rank + 1) * per_rank]
            shard = shard.to(device)
            model.train()
            synchronize(device)
            dist.barrier()
            start = time.perf_counter()
            examples = 0
            for i in range(0, per_rank, bs):
                idx = shard[i:i + bs]
                xb = X[idx].float().div_(255).contiguous(memory_format=fmt)
                if use_graph:
                    if len(idx) < bs:
                        continue  # every rank skips the same short last batch
                    if static is None:
                        static = (xb.clone(memory_format=fmt), Y[idx].clone())
                    static[0].copy_(xb)
                    static[1].copy_(Y[idx])
                    if graph is None:  # DDP asks for 11 eager steps before capture
                        graph, _ = _capture_step(model, loss_fn, optimizer, *static,
                                                 config['amp'], warmup=epoch == 0,
                                                 warmup_steps=11)
                    graph.replay()
                else:
                    with _autocast(device, config['amp']):
                        loss = loss_fn(model(xb), Y[idx])
                    optimizer.zero_grad(set_to_none=True)
                    loss.backward()
                    optimizer.step()
                examples += len(idx)
            synchronize(device)
            dist.barrier()
            history['epoch_times'].append(time.perf_counter() - start)
            if rank == 0:
                with _autocast(device, config['amp']):
                    history['test_acc'].append(evaluate_accuracy(test_iter, net, device))
        history['examples'] = examples * world_size
        history['images_per_s'] = history['examples'] / min(history['epoch_times'])
        if rank == 0:
            with open(os.path.join(out_dir, 'result.json'), 'w') as f:
                json.dump(history, f)
        dist.destroy_process_group()
    except BaseException:
        with open(os.path.join(out_dir, f'error-{rank}.txt'), 'w') as f:
            f.write(traceback.format_exc())
        sys.exit(1)  # run_ddp reports the error; no traceback spilled on stderr


def run_ddp(world_size, num_epochs=4, batch_size=256, lr=0.1, max_examples=None,
            amp=True, channels_last=True, cuda_graph=False, gradient_as_bucket_view=True,
            momentum=0.0, weight_decay=0.0, lr_schedule=None, backend=None, timeout=900, seed=0,
            fail_rank=None):
    """Train ResNet-18 on Fashion-MNIST with DistributedDataParallel.

    Starts ``world_size`` fresh processes (``spawn``) running
    :func:`ddp_worker`, one per GPU, with NCCL; on a machine without GPUs the
    processes share the CPU and use gloo. Waits for them with a deadline: if
    a worker dies, the others are killed and the error names the rank, its
    exit code and its traceback; if the deadline passes, all are killed.
    No child process outlives this call.

    Args:
        world_size (int): number of processes (GPUs).
        num_epochs (int): passes over the data.
        batch_size (int): examples per step *per process*.
        lr (float): SGD learning rate.
        max_examples (int or None): first N training/test examples (None: all).
        amp (bool): bf16 autocast on GPUs.
        channels_last (bool): NHWC memory format.
        cuda_graph (bool): record the process's whole step, gradient
            all-reduce included, as a CUDA graph (NCCL only; ignored with
            gloo). The first 11 steps run eagerly, as DDP requires before a
            capture; a short last batch is skipped, as in :func:`train`.
            One process only: with two processes the captured step hung on
            2x H200 (PyTorch 2.11), so ``world_size > 1`` is refused.
        gradient_as_bucket_view (bool): DDP's option of that name: the
            gradients live directly in DDP's all-reduce buckets instead of
            being copied into them. With channels_last the gradients' strides
            do not match the buckets' (DDP warns), so the copy comes back.
            On 2x H200 it made 2 processes faster and 1 process slower
            (bench/results/*-ddp-options.json); runs vary a lot.
        momentum, weight_decay, lr_schedule: SGD settings, as in :func:`train`.
        backend (str or None): 'nccl' or 'gloo'; default nccl with GPUs.
        timeout (float): seconds before the run is abandoned.
        seed (int): seed of the data order and the initial weights.
        fail_rank (int or None): make that rank raise at start (for tests).

    Returns:
        dict: ``epoch_times`` (s), ``test_acc``, ``images_per_s`` (best epoch,
        all processes together), ``examples``, ``world_size``, ``backend``,
        ``device``.

    Raises:
        ValueError: bad ``world_size`` or ``batch_size``, more GPUs asked
            for than exist, or ``cuda_graph`` with more than one process.
        RuntimeError: a worker failed.
        TimeoutError: the run took longer than ``timeout`` seconds.
    """
    import torch.multiprocessing as mp

    _data.check_positive_int('world_size', world_size)
    _data.check_positive_int('batch_size', batch_size)
    _lr_factor(lr_schedule, 0, 1)
    if backend is None:
        backend = 'nccl' if num_gpus() > 0 else 'gloo'
    if backend == 'nccl':
        try_devices(world_size)  # raises a clear error when GPUs are missing
    if cuda_graph and backend == 'nccl' and world_size > 1:
        raise ValueError(
            f'cuda_graph=True with world_size={world_size}: capturing the DDP step in more '
            'than one process never finished on 2x H200 with PyTorch 2.11 (it hung until '
            'the timeout; see bench/results), so it is refused rather than left to hang. '
            'Use cuda_graph=False with several processes, or world_size=1.')
    config = {'num_epochs': num_epochs, 'batch_size': batch_size, 'lr': lr,
              'max_examples': _data.parse_max_examples(max_examples)
              if max_examples is not None else _data.max_examples_from_env(),
              'amp': amp, 'channels_last': channels_last, 'backend': backend,
              'cuda_graph': bool(cuda_graph) and backend == 'nccl',
              'gradient_as_bucket_view': bool(gradient_as_bucket_view),
              'momentum': momentum, 'weight_decay': weight_decay, 'lr_schedule': lr_schedule,
              'timeout': timeout, 'seed': seed, 'fail_rank': fail_rank}
    ctx = mp.get_context('spawn')
    port = _free_port()
    with tempfile.TemporaryDirectory(prefix='d2lzh-ddp-') as out_dir:
        procs = [ctx.Process(target=ddp_worker, args=(r, world_size, port, config, out_dir),
                             daemon=True) for r in range(world_size)]
        for p in procs:
            p.start()
        deadline = time.monotonic() + timeout
        try:
            while True:
                codes = [p.exitcode for p in procs]
                failed = [(r, c) for r, c in enumerate(codes) if c not in (None, 0)]
                if failed:
                    rank, code = failed[0]
                    err_file = os.path.join(out_dir, f'error-{rank}.txt')
                    detail = open(err_file).read().strip().splitlines()[-1] \
                        if os.path.exists(err_file) else 'no traceback was written'
                    raise RuntimeError(f'DDP worker rank {rank} of {world_size} exited with '
                                       f'code {code}: {detail}. The other workers were '
                                       'stopped.')
                if all(c == 0 for c in codes):
                    break
                if time.monotonic() > deadline:
                    raise TimeoutError(f'DDP training did not finish within {timeout} s; '
                                       'all workers were stopped. Raise timeout= or '
                                       'train on fewer examples.')
                time.sleep(0.2)
        finally:
            for p in procs:
                if p.is_alive():
                    p.kill()
            for p in procs:
                p.join(timeout=30)
        with open(os.path.join(out_dir, 'result.json')) as f:
            return json.load(f)


def setup_report():
    """Print the versions and GPUs this notebook runs with; says plainly when
    there is no GPU. Returns None."""
    import platform
    cuda = torch.version.cuda or 'none (CPU build)'
    print(f'Python {platform.python_version()}, PyTorch {torch.__version__}, CUDA {cuda}, '
          f'CPU cores: {os.cpu_count()}')
    if num_gpus():
        names = ', '.join(f'cuda:{i} = {gpu_name(i)}' for i in range(num_gpus()))
        print(f'可用的GPU（{num_gpus()}块）：{names}')
    else:
        print('没有可用的GPU：本笔记本在CPU上运行，需要GPU的地方由CPU代替，'
              '多GPU的代码路径同样能跑通，但不会更快。')
