"""Training loops of the PyTorch edition (book 8.5 and beyond): ``train`` on
one device with the options of the notebook 在现代GPU上把训练跑满 (bf16, channels_last,
torch.compile, the whole step as a CUDA graph, SGD momentum and a cosine
schedule) and ``train_data_parallel`` (``nn.DataParallel``).
"""
import math
import time
import warnings

import torch
from torch import nn

from .book import evaluate_accuracy, synchronize

__all__ = ['train', 'train_data_parallel']


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
