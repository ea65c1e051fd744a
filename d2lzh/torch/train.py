"""The book's training loop in PyTorch (8.5): :func:`train` on one device, and
:func:`train_data_parallel`, the same loop over ``nn.DataParallel``. The fast path
(mixed precision, CUDA graphs, schedules, stop at a target accuracy) is
:func:`d2lzh.torch.recipe.train_fast`.
"""
import time

import torch
from torch import nn

from .book import evaluate_accuracy, synchronize

__all__ = ['train', 'train_data_parallel']


def train(net, train_iter, test_iter, num_epochs, lr, device, verbose=True):
    """Train a classifier with minibatch SGD and cross-entropy loss, fp32 (book 8.5).

    Each epoch is timed from its first batch to a synchronisation after its last; the
    test accuracy after it is not part of that time.

    Args:
        net (nn.Module): the model, moved to ``device``.
        train_iter, test_iter: iterables of ``(X, y)``, X float32 (batch, ...), y int64
            (batch,), on the host or on ``device``.
        num_epochs (int): passes over ``train_iter``.
        lr (float): learning rate.
        device (torch.device or str): where to train.
        verbose (bool): print one line per epoch.

    Returns:
        dict: ``epoch_times`` (s), ``train_loss`` and ``test_acc`` (one per epoch),
        ``examples`` (per epoch) and ``images_per_s`` (of the fastest epoch).
    """
    net = net.to(device)
    optimizer = torch.optim.SGD(net.parameters(), lr=lr)
    loss_fn = nn.CrossEntropyLoss()
    history = {'epoch_times': [], 'train_loss': [], 'test_acc': [], 'examples': 0}
    for epoch in range(num_epochs):
        net.train()
        synchronize(device)
        start = time.perf_counter()
        total_loss, examples = torch.zeros((), device=device), 0
        for X, y in train_iter:
            X, y = X.to(device, non_blocking=True), y.to(device, non_blocking=True)
            loss = loss_fn(net(X), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            total_loss += loss.detach() * y.shape[0]  # stays on the device: no wait per batch
            examples += y.shape[0]
        synchronize(device)
        history['epoch_times'].append(time.perf_counter() - start)
        history['train_loss'].append(total_loss.item() / examples)
        history['test_acc'].append(evaluate_accuracy(test_iter, net, device))
        history['examples'] = examples
        if verbose:
            print(f'epoch {epoch + 1}: loss {history["train_loss"][-1]:.3f}, test acc '
                  f'{history["test_acc"][-1]:.3f}, {history["epoch_times"][-1]:.2f} s '
                  f'({examples / history["epoch_times"][-1]:.0f} images/s)')
    history['images_per_s'] = history['examples'] / min(history['epoch_times'])
    return history


def train_data_parallel(net, train_iter, test_iter, num_epochs, lr, devices, verbose=True):
    """:func:`train` with ``nn.DataParallel`` over ``devices`` (one process, threads).

    Every step, DataParallel copies the parameters from the first GPU to the others,
    splits the batch, runs the replicas in threads and gathers the outputs on the first
    GPU: all from one Python process. With one device, or on the CPU, it simply calls
    the model.

    Args: as :func:`train`, with ``devices`` (list of torch.device) for ``device``.

    Returns:
        dict: as :func:`train`.
    """
    ids = [d.index for d in devices if d.type == 'cuda']
    model = nn.DataParallel(net.to(devices[0]), device_ids=ids) if len(ids) > 1 else net
    return train(model, train_iter, test_iter, num_epochs, lr, devices[0], verbose=verbose)
