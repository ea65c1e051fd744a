"""Fashion-MNIST as torch tensors (book 3.5): the minibatch iterator with its three places
for the data (host, pinned host memory, GPU), one worker's shard of it for data-parallel
training, and the book's ``load_data_fashion_mnist``. Files, verification and
``$D2LZH_MAX_EXAMPLES`` come from :mod:`d2lzh.data`; torchvision is not needed.
"""
import numpy as np
import torch
import torch.nn.functional as F

from .. import checks as _checks
from .. import data as _data
from .. import jobs as _jobs
from .. import results as _results
from .book import num_gpus

__all__ = ['FashionMNISTIter', 'ShardIter', 'load_data_fashion_mnist', 'choose_max_examples']


class FashionMNISTIter(_data.MinibatchIter):
    """Minibatches of Fashion-MNIST as torch tensors (book 3.5): ``(X, y)``, X float32
    (batch, 1, H, W) in [0, 1], y int64 (batch,); the last batch may be smaller. Shuffling
    uses ``torch.randperm`` (seed with ``torch.manual_seed``). Where the data lives is the
    point of chapter 8's PyTorch notebooks:

    * ``device=None`` (the book's way): float32 batches are cut on the host and the
      training loop copies each one to the GPU;
    * ``pin_memory=True``: the same, from page-locked (pinned) host memory, so the loop's
      ``X.to('cuda', non_blocking=True)`` returns at once and the copy can overlap
      computation. The data set is pinned once; with shuffling, each pass first gathers the
      shuffled epoch into a second pinned buffer (one ``index_select``), so every batch is
      a slice of pinned memory. Before refilling that buffer, the iterator waits for a CUDA
      event recorded when the previous pass ended, so queued copies still read their data.
      Batches are views of that buffer: ``.clone()`` one to keep it past the next pass;
    * ``device='cuda'``: the data set is kept on the GPU as uint8 (47 MB for
      Fashion-MNIST), and batches are shuffled, cut and scaled there: no copy per batch.

    Args:
        images (numpy.ndarray): uint8 (N, 28, 28).
        labels (numpy.ndarray): int (N,).
        batch_size (int): examples per batch.
        shuffle (bool): new order every pass.
        resize (int or None): bilinear resize to resize x resize per batch.
        device (torch.device, str or None): keep the data on this device.
        pin_memory (bool): keep host data in pinned memory (ignored without CUDA or with
            ``device``); shuffled, it costs 2x the float32 data set (376 MB) of it.
    """

    def __init__(self, images, labels, batch_size, shuffle, resize=None, device=None,
                 pin_memory=False):
        self.batch_size, self.shuffle, self.resize = batch_size, shuffle, resize
        self.device = torch.device(device) if device is not None else torch.device('cpu')
        X = torch.tensor(images, dtype=torch.uint8).unsqueeze(1)
        self.labels = torch.from_numpy(labels.astype(np.int64))
        self.pin_memory = pin_memory and torch.cuda.is_available() and self.device.type == 'cpu'
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
        """This pass's (images, labels, index or None): batches are cut from the first two,
        through the index when it is not None."""
        if not self.shuffle:
            return self.images, self.labels, None
        order = torch.randperm(len(self.labels), device=self.device)
        if self._epoch_buffers is None:
            return self.images, self.labels, order
        if self._pass_done is not None:
            self._pass_done.synchronize()  # copies queued from the last pass are done
        X, y = self._epoch_buffers
        torch.index_select(self.images, 0, order, out=X)
        torch.index_select(self.labels, 0, order, out=y)
        return X, y, None

    def _batch(self, images, labels, index):
        """The minibatch at ``index`` (a slice or int64 tensor), as float32, resized."""
        X, y = images[index], labels[index]
        if X.dtype == torch.uint8:
            X = X.float().div_(255)
        if self.resize is not None:
            X = F.interpolate(X, size=(self.resize, self.resize), mode='bilinear',
                              align_corners=False)
        return X, y

    def __iter__(self):
        images, labels, order = self._order()
        try:
            for start in range(0, len(labels), self.batch_size):
                index = slice(start, start + self.batch_size)
                yield self._batch(images, labels, index if order is None else order[index])
        finally:
            if self._epoch_buffers is not None:  # the consumer has queued its copies
                self._pass_done = torch.cuda.Event()
                self._pass_done.record()


class ShardIter(FashionMNISTIter):
    """One worker's minibatches in data-parallel training (beyond the book): step t takes
    worker ``rank``'s slice of the t-th global minibatch of ``batch_size * world_size``
    examples of the epoch's permutation (:func:`d2lzh.jobs.batch_indices`, the project's
    one sharding rule); ``len()`` full batches per epoch, the rest dropped, as
    ``DistributedSampler(drop_last=True)`` does. :meth:`set_epoch` picks the permutation.
    The data lives where ``device`` says, as in :class:`FashionMNISTIter`.

    Args:
        images, labels, batch_size (per worker), device: as :class:`FashionMNISTIter`.
        rank, world_size (int): this worker and the number of workers.
        seed (int): epoch e's permutation is ``numpy.random.RandomState(seed + e)``'s.

    Raises:
        ValueError: fewer examples than one global minibatch, or a bad rank.
    """

    def __init__(self, images, labels, batch_size, rank, world_size, seed=0, device=None):
        super().__init__(images, labels, batch_size, shuffle=False, device=device)
        self.rank, self.world_size, self.seed, self.epoch = rank, world_size, seed, 0
        _jobs.batch_indices(len(self.labels), batch_size, world_size, rank, 0, seed)  # checks

    def set_epoch(self, epoch):
        """Train on ``epoch``'s permutation in the next pass."""
        self.epoch = epoch

    def __len__(self):
        return len(self.labels) // (self.batch_size * self.world_size)

    def __iter__(self):
        for index in _jobs.batch_indices(len(self.labels), self.batch_size, self.world_size,
                                         self.rank, self.epoch, self.seed):
            yield self._batch(self.images, self.labels, torch.from_numpy(index).to(self.device))


def load_data_fashion_mnist(batch_size, resize=None, root=None, max_examples=None,
                            device=None, pin_memory=False):
    """Fashion-MNIST as a pair of iterators (book 3.5), without torchvision.

    Args:
        batch_size (int): positive.
        resize (int or None): positive side length to resize the images to.
        root (str or None): folder searched first (see :mod:`d2lzh.data`).
        max_examples (int, 'all' or None): first N training and N test examples; None
            reads ``$D2LZH_MAX_EXAMPLES``.
        device, pin_memory: where the data lives, see :class:`FashionMNISTIter`.

    Returns:
        (FashionMNISTIter, FashionMNISTIter): shuffled training data, test data.

    Raises:
        ValueError: invalid ``batch_size``, ``resize`` or ``max_examples``.
        d2lzh.data.FashionMNISTNotFoundError, d2lzh.data.CorruptDataError: see
            :func:`d2lzh.data.load_fashion_mnist`.
    """
    _checks.check_positive_int('batch_size', batch_size)
    _checks.check_positive_int('resize', resize, allow_none=True)
    train_x, train_y, test_x, test_y = _data.load_fashion_mnist(root, max_examples)
    return (FashionMNISTIter(train_x, train_y, batch_size, True, resize, device, pin_memory),
            FashionMNISTIter(test_x, test_y, batch_size, False, resize, device, pin_memory))


def choose_max_examples(cpu_default, gpu_available=None):
    """How much of Fashion-MNIST to train on; prints the choice (see
    :func:`d2lzh.results.choose_max_examples`; ``gpu_available``: default, a GPU here)."""
    if gpu_available is None:
        gpu_available = num_gpus() > 0
    return _results.choose_max_examples(cpu_default, gpu_available)
