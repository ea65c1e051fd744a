"""Fashion-MNIST as torch tensors (book 3.5), without torchvision: the minibatch iterator
and its three places for the data, one worker's shard of it, ``load_data_fashion_mnist``.
The files (and ``$D2LZH_MAX_EXAMPLES``) are :mod:`d2lzh.data`'s."""
import numpy as np
import torch
import torch.nn.functional as F

from .. import checks as _checks, data as _data, jobs as _jobs
from .book import num_gpus


class FashionMNISTIter(_data.MinibatchIter):
    """Minibatches ``(X, y)`` of ``images`` (uint8 (N, 28, 28)) and ``labels`` (int (N,)): X
    float32 (batch, 1, H, W) in [0, 1] (bilinear ``resize`` x ``resize`` if given), y int64
    (batch,); the last may be smaller; ``shuffle``: a new ``torch.randperm`` order every pass.
    Where the data lives is the point of chapter 8's PyTorch notebooks. ``device=None`` (the
    book's way): batches are cut on the host, the loop copies them. ``pin_memory=True`` (with
    CUDA): the same from pinned memory, so that ``X.to('cuda', non_blocking=True)`` overlaps
    computation; a shuffled pass is gathered into a second pinned buffer (2 x 188 MB in all),
    refilled only after a CUDA event of the previous pass (batches are views: ``.clone()`` to
    keep). ``device='cuda'``: the data set lives on the GPU as uint8 (47 MB), batches are
    shuffled, cut and scaled there: no copy per batch."""

    def __init__(self, images, labels, batch_size, shuffle, resize=None, device=None,
                 pin_memory=False):
        self.batch_size, self.shuffle, self.resize = batch_size, shuffle, resize
        self.device = torch.device(device or 'cpu')
        X = torch.tensor(images, dtype=torch.uint8).unsqueeze(1)
        y, host = torch.from_numpy(labels.astype(np.int64)), self.device.type == 'cpu'
        # on the host float32 once (batches are views), on a GPU uint8 (scaled per batch)
        self.images, self.labels = (X.float().div_(255), y) if host else \
            (X.to(self.device), y.to(self.device))
        self._epoch_buffers = self._pass_done = None
        if pin_memory and torch.cuda.is_available() and host:
            self.images, self.labels = self.images.pin_memory(), self.labels.pin_memory()
            if shuffle:
                self._epoch_buffers = tuple(torch.empty_like(t).pin_memory()
                                            for t in (self.images, self.labels))

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
        images, labels = self.images, self.labels
        order = torch.randperm(len(labels), device=self.device) if self.shuffle else None
        if self._epoch_buffers is not None:  # pinned and shuffled: gather the pass first
            if self._pass_done is not None:
                self._pass_done.synchronize()  # copies queued from the last pass are done
            images, labels = self._epoch_buffers
            torch.index_select(self.images, 0, order, out=images)
            torch.index_select(self.labels, 0, order, out=labels)
            order = None
        try:
            for start in range(0, len(labels), self.batch_size):
                index = slice(start, start + self.batch_size)
                yield self._batch(images, labels, index if order is None else order[index])
        finally:
            if self._epoch_buffers is not None:  # the consumer has queued its copies
                self._pass_done = torch.cuda.Event()
                self._pass_done.record()


class ShardIter(FashionMNISTIter):
    """Worker ``rank`` of ``world_size``'s minibatches of ``batch_size`` (beyond the book) by
    the one sharding rule, :func:`d2lzh.jobs.batch_indices` (:meth:`set_epoch` picks the
    epoch; like ``DistributedSampler(drop_last=True)``); data as :class:`FashionMNISTIter`'s.
    ValueError: fewer examples than one global minibatch, or a bad rank."""

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
        steps = _jobs.batch_indices(len(self.labels), self.batch_size, self.world_size,
                                    self.rank, self.epoch, self.seed)
        # One copy of the epoch's indices: a copy per step from pageable memory made the CPU
        # wait for the GPU at every step (DDP on 1 GPU ran 5 % slower than one plain process).
        for index in torch.from_numpy(np.stack(steps)).to(self.device):
            yield self._batch(self.images, self.labels, index)


def load_data_fashion_mnist(batch_size, resize=None, root=None, max_examples=None,
                            device=None, pin_memory=False):
    """Fashion-MNIST as (shuffled training, test) :class:`FashionMNISTIter` (book 3.5): the
    arguments and errors of :func:`d2lzh.mxnet.load_data_fashion_mnist`, with ``device`` and
    ``pin_memory`` of :class:`FashionMNISTIter`."""
    _checks.check_positive_int('batch_size', batch_size)
    _checks.check_positive_int('resize', resize, allow_none=True)
    train_x, train_y, test_x, test_y = _data.load_fashion_mnist(root, max_examples)
    return (FashionMNISTIter(train_x, train_y, batch_size, True, resize, device, pin_memory),
            FashionMNISTIter(test_x, test_y, batch_size, False, resize, device, pin_memory))
