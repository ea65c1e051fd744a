"""The book's training loop (8.5): :func:`train` on one device, :func:`train_data_parallel`
over ``nn.DataParallel``; the fast path is :func:`d2lzh.torch.recipe.train_fast`."""
import time

import torch
from torch import nn

from .book import evaluate_accuracy, synchronize


def train(net, train_iter, test_iter, num_epochs, lr, device, verbose=True):
    """Train classifier ``net`` (moved to ``device``) for ``num_epochs`` with minibatch SGD at rate
    ``lr`` and cross-entropy loss, fp32 (book 8.5); ``train_iter``, ``test_iter`` yield ``(X, y)``,
    X float32 (batch, ...), y int64 (batch,), on the host or ``device``. An epoch is timed from its
    first batch to a synchronisation after its last (the test accuracy after it apart); ``verbose``
    prints one line per epoch. Returns a dict: ``epoch_times`` (s), ``train_loss``, ``test_acc``
    (one per epoch), ``examples`` (per epoch) and ``images_per_s`` (of the fastest epoch)."""
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
            print_epoch(history, epoch, history['test_acc'][-1], examples)
    history['images_per_s'] = history['examples'] / min(history['epoch_times'])
    return history


def print_epoch(history, epoch, acc, examples, reached=None):
    """Print epoch ``epoch``'s line (0-based) of ``history`` (train's or train_fast's): loss,
    test accuracy ``acc`` (None: '-'), seconds, images/s of ``examples``, ``reached`` target."""
    seconds = history['epoch_times'][-1]
    print(f'迭代周期 {epoch + 1}：损失 {history["train_loss"][-1]:.3f}，测试准确率 '
          f'{"-" if acc is None else f"{acc:.3f}"}，{seconds:.2f} 秒（{examples / seconds:.0f} '
          '张/秒）' + (f'，达到目标 {reached}' if reached else ''))


def train_data_parallel(net, train_iter, test_iter, num_epochs, lr, devices, verbose=True):
    """:func:`train` over ``nn.DataParallel`` on ``devices`` (a list; book 8.5): each step
    copies the parameters from the first GPU to the others, splits the batch, runs the
    replicas in threads of this one process and gathers the outputs on the first GPU. With
    one device, or on the CPU, the model is called as it is."""
    ids = [d.index for d in devices if d.type == 'cuda']
    model = nn.DataParallel(net.to(devices[0]), device_ids=ids) if len(ids) > 1 else net
    return train(model, train_iter, test_iter, num_epochs, lr, devices[0], verbose=verbose)
