"""Fashion-MNIST as torch tensors (book 3.5): the minibatch iterator with its
three places for the data (host, pinned host memory, GPU) and the book's
``load_data_fashion_mnist``. Files, verification and ``$D2LZH_MAX_EXAMPLES``
come from :mod:`d2lzh.data`; torchvision is not needed.
"""
import numpy as np
import torch
import torch.nn.functional as F

from .. import checks as _checks
from .. import data as _data
from .book import num_gpus

__all__ = ['FashionMNISTIter', 'load_data_fashion_mnist', 'choose_max_examples']


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
    _checks.check_positive_int('batch_size', batch_size)
    _checks.check_positive_int('resize', resize, allow_none=True)
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
