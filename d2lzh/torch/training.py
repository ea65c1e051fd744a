"""Training loops of the PyTorch edition (book 8.5 and beyond): ``train`` on
one device with the options of the notebook 在现代GPU上把训练跑满 (bf16, channels_last,
torch.compile, the whole step as a CUDA graph, SGD momentum and a cosine
schedule) and ``train_data_parallel`` (``nn.DataParallel``).
"""
import math
import os
import time
import warnings

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from .book import evaluate_accuracy, synchronize

__all__ = ['train', 'train_data_parallel']


# ------------------------------------------------------------- training (8.5)

def _amp_mode(device, amp):
    """What ``amp=`` means on ``device``: None (fp32), 'bf16' or 'fp16'.

    bf16 autocast needs compute capability 8.0 (Ampere) or newer; on older
    GPUs such as the T4 (7.5) fp16 autocast with a ``torch.amp.GradScaler``
    is used instead. ``amp`` may also name the dtype ('bf16', 'fp16') to
    force it. On the CPU mixed precision is off.
    """
    device = torch.device(device)
    if not amp or device.type != 'cuda':
        return None
    if amp in ('bf16', 'fp16'):
        return amp
    if amp is not True:
        raise ValueError(f"amp={amp!r} is not valid: use False, True, 'bf16' or 'fp16'")
    major, _ = torch.cuda.get_device_capability(device)
    return 'bf16' if major >= 8 else 'fp16'


def _amp_description(device, mode):
    if mode is None:
        return 'fp32 (no mixed precision)'
    if mode == 'bf16':
        return 'bf16 autocast'
    major, minor = torch.cuda.get_device_capability(device)
    return (f'fp16 autocast + GradScaler ({device} has compute capability {major}.{minor}: '
            'no fast bf16 before 8.0)')


def _autocast(device, amp, cache_enabled=True):
    """An autocast context for ``amp`` (False/True/'bf16'/'fp16', see
    :func:`_amp_mode`); a disabled one on the CPU or with ``amp=False``."""
    mode = _amp_mode(device, amp)
    if mode is None:
        return torch.autocast(device_type='cpu', enabled=False)
    dtype = torch.bfloat16 if mode == 'bf16' else torch.float16
    return torch.autocast(device_type='cuda', dtype=dtype, cache_enabled=cache_enabled)


def _eager_step(model, loss_fn, optimizer, scaler, X, y, device, amp, cache_enabled=True):
    """One eager training step (forward under autocast, backward, update, with the
    GradScaler when ``scaler`` is not None); returns the loss tensor. Shared by
    :func:`train`'s loop and :mod:`d2lzh.torch.fast`."""
    with _autocast(device, amp, cache_enabled=cache_enabled):
        loss = loss_fn(model(X), y)
    optimizer.zero_grad(set_to_none=True)
    if scaler is None:
        loss.backward()
        optimizer.step()
    else:
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
    return loss


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
          weight_decay=0.0, lr_schedule=None, verbose=True, checkpoint=None, *,
          nesterov=False, label_smoothing=0.0, warmup=0.0, target_accuracy=None,
          eval_from=1):
    """Train a classifier with SGD and cross-entropy on one device (book 8.5).

    With the defaults this is the book's loop: fp32, plain SGD at a constant
    learning rate, one Python-driven step per batch. The options add the
    techniques of the notebook "在现代GPU上把训练跑满". Each epoch is timed from
    its first batch to a synchronisation after its last; the test-set
    evaluation after it is timed separately.

    This is also the loop of every DistributedDataParallel process
    (:mod:`d2lzh.torch.distributed`): pass a model wrapped in
    ``DistributedDataParallel`` (already on ``device``, in the memory format
    that ``channels_last`` asks for) and each process's own shard as
    ``train_iter``. Then every epoch starts and ends with a barrier of the
    process group, the test set is evaluated on the wrapped module (no
    collective), and only rank 0 writes the checkpoint. An iterator with a
    ``set_epoch(epoch)`` method is told the epoch before each pass.

    Args:
        net (nn.Module): the model; moved to ``device`` (unless wrapped in
            DistributedDataParallel, see above).
        train_iter, test_iter: iterables of ``(X, y)`` (on the host or on
            ``device``; host batches are copied with ``non_blocking=True``).
            ``test_iter=None``: no evaluation (``test_acc`` stays empty).
        num_epochs (int): passes over ``train_iter``.
        lr (float): (peak) learning rate.
        device (torch.device or str): where to train.
        amp (bool or str): mixed precision on CUDA (ignored on the CPU):
            True picks bf16 autocast on GPUs of compute capability >= 8.0 and
            fp16 autocast with a ``torch.amp.GradScaler`` on older ones (a T4
            has no fast bf16); 'bf16' or 'fp16' forces one. The choice is
            printed (``verbose``) and returned as ``history['amp']``.
        channels_last (bool): NHWC memory format for the model and inputs.
        compile_model (bool): ``torch.compile`` the model (the first epoch
            then includes compilation).
        cuda_graph (bool): record the whole training step as a CUDA graph and
            replay it for every full batch (CUDA only). A last batch smaller
            than the first one is skipped (and not counted) in this mode.
            With ``compile_model`` as well, the graph records the compiled
            model (compilation happens in the eager warm-up steps before the
            first capture). A learning rate that changes between epochs means
            one new capture per epoch. Graphs are recorded with bf16 or fp32
            only: with fp16 (GradScaler) the steps run eagerly, with a
            RuntimeWarning. If a capture fails, a RuntimeWarning names the
            cause and training goes on with eager steps.
        momentum (float): SGD momentum.
        weight_decay (float): SGD weight decay.
        lr_schedule (None or 'cosine'): constant, or cosine decay with one
            learning rate per epoch.
        verbose (bool): print one line per epoch.
        checkpoint (str or os.PathLike or None): a file written after every
            epoch (model, optimizer, history; atomically). If it exists when
            training starts, training resumes after the epoch it holds.

    Time-to-accuracy options (beyond the book; keyword only; issue 11). Any
    of them, or ``lr_schedule='linear'``, selects the loop of
    :func:`d2lzh.torch.fast.train_to_accuracy` (one model on one device, no
    ``checkpoint``): a learning rate per step, the start-up timed apart and
    an early stop. ``d2l.FAST_RECIPE`` is the set measured fastest to 0.92
    (with ``FAST_BATCH_SIZE``, ``FAST_EPOCHS``, ``FAST_LR``):

        lr_schedule='linear': linear warm-up over the first ``warmup``
            fraction of all steps, then linear decay to 0 at the last step.
        nesterov (bool): Nesterov momentum.
        label_smoothing (float): in [0, 1), of the cross-entropy loss.
        warmup (float): fraction of all steps in [0, 1) (with 'linear').
        target_accuracy (float or None): stop after the first evaluated
            epoch whose test accuracy is >= this. If it is never reached,
            all ``num_epochs`` run and ``history['reached']`` is None.
        eval_from (int): evaluate only after epochs ``eval_from`` ..
            ``num_epochs`` (1: every epoch); the others record None in
            ``test_acc``.

        That loop's history adds ``warmup_time`` (s: the first step, or the
        eager warm-up steps and the capture; not in ``epoch_times``) and
        ``reached`` (None or ``{'epoch', 'test_acc', 'seconds'}``, seconds
        since ``train`` was called).

    Returns:
        dict: ``epoch_times`` (s), ``eval_times`` (s), ``test_acc`` and
        ``train_loss`` (per epoch), ``examples`` (trained on per epoch, by
        this process), ``images_per_s`` (fastest epoch, this process),
        ``amp`` ('bf16', 'fp16' or 'off'), ``start_epoch`` (0, or the epoch
        resumed at from ``checkpoint``).

    Raises:
        ValueError: unknown ``lr_schedule`` or ``amp``, a
            DistributedDataParallel model whose parameters are not on
            ``device``, or a time-to-accuracy option out of range.
    """
    if (lr_schedule == 'linear' or nesterov or label_smoothing or warmup
            or target_accuracy is not None or eval_from != 1):
        from .fast import train_to_accuracy
        if isinstance(net, DistributedDataParallel) or checkpoint is not None:
            raise ValueError('the time-to-accuracy options train one model on one device '
                             'without checkpoint=: leave them out for DDP or checkpoints')
        return train_to_accuracy(
            net, train_iter, test_iter, num_epochs, lr, device, amp=amp,
            channels_last=channels_last, compile_model=compile_model, cuda_graph=cuda_graph,
            momentum=momentum, weight_decay=weight_decay, lr_schedule=lr_schedule,
            verbose=verbose, nesterov=nesterov, label_smoothing=label_smoothing,
            warmup=warmup, target_accuracy=target_accuracy, eval_from=eval_from)
    device = torch.device(device)
    _lr_factor(lr_schedule, 0, num_epochs)  # validate early
    distributed = isinstance(net, DistributedDataParallel)
    module = net.module if distributed else net
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    if distributed:
        first = next(module.parameters())
        if first.device != device:
            raise ValueError(f'the DistributedDataParallel model is on {first.device}, not on '
                             f'device={device}: move the module to the device before '
                             'wrapping it')
    else:
        net = module = net.to(device, memory_format=fmt)
    mode = _amp_mode(device, amp)
    use_graph = bool(cuda_graph) and device.type == 'cuda'
    if use_graph and mode == 'fp16':
        warnings.warn('cuda_graph=True with fp16 autocast: a GradScaler step is not recorded '
                      'in a CUDA graph here; training with eager steps', RuntimeWarning,
                      stacklevel=2)
        use_graph = False
    scaler = torch.amp.GradScaler('cuda') if mode == 'fp16' else None
    model = torch.compile(net) if compile_model else net
    optimizer = torch.optim.SGD(net.parameters(), lr=lr, momentum=momentum,
                                weight_decay=weight_decay)
    loss_fn = nn.CrossEntropyLoss()
    eval_net = module if distributed else model
    rank = torch.distributed.get_rank() if distributed else 0
    history = {'epoch_times': [], 'eval_times': [], 'test_acc': [], 'train_loss': [],
               'amp': mode or 'off', 'start_epoch': 0}
    if verbose and amp and device.type == 'cuda':
        print(f'amp: {_amp_description(device, mode)}')
    if checkpoint is not None and os.path.exists(checkpoint):
        state = torch.load(checkpoint, map_location=device, weights_only=True)
        module.load_state_dict(state['model'])
        optimizer.load_state_dict(state['optimizer'])
        if scaler is not None and 'scaler' in state:
            scaler.load_state_dict(state['scaler'])
        history = state['history']
        history['start_epoch'] = state['epoch'] + 1
        if verbose:
            print(f'resuming from {os.path.basename(checkpoint)}: epoch {state["epoch"] + 1} '
                  f'of {num_epochs} done')
    graph = static = None
    examples = history.get('examples', 0)
    for epoch in range(history['start_epoch'], num_epochs):
        new_lr = lr * _lr_factor(lr_schedule, epoch, num_epochs)
        if new_lr != optimizer.param_groups[0]['lr']:
            graph = None  # the learning rate is baked into a recorded graph
        for group in optimizer.param_groups:
            group['lr'] = new_lr
        if hasattr(train_iter, 'set_epoch'):
            train_iter.set_epoch(epoch)
        net.train()
        _sync(device, distributed)
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
                    try:  # DDP asks for 11 eager steps before a capture
                        graph, loss = _capture_step(model, loss_fn, optimizer, *static, mode,
                                                    warmup=epoch == 0 and examples == 0,
                                                    warmup_steps=11 if distributed else 3)
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
                loss = _eager_step(model, loss_fn, optimizer, scaler, X, y, device, mode)
            total_loss += loss.detach() * y.shape[0]
            examples += y.shape[0]
        _sync(device, distributed)
        history['epoch_times'].append(time.perf_counter() - start)
        if test_iter is not None:
            start = time.perf_counter()
            with _autocast(device, mode):
                acc = evaluate_accuracy(test_iter, eval_net, device)
            history['eval_times'].append(time.perf_counter() - start)
            history['test_acc'].append(acc)
        history['train_loss'].append(total_loss.item() / max(examples, 1))
        history['examples'] = examples
        if verbose:
            acc_text = f', test acc {history["test_acc"][-1]:.3f}' if test_iter is not None else ''
            print(f'epoch {epoch + 1}: loss {history["train_loss"][-1]:.3f}{acc_text}, '
                  f'{history["epoch_times"][-1]:.2f} s '
                  f'({examples / history["epoch_times"][-1]:.0f} images/s)')
        if checkpoint is not None and rank == 0:
            _save_checkpoint(checkpoint, epoch, module, optimizer, scaler, history)
    history['examples'] = examples
    history['images_per_s'] = examples / min(history['epoch_times']) \
        if history['epoch_times'] else 0.0
    return history


def _sync(device, distributed):
    """Wait for the device; with DistributedDataParallel, also for every process."""
    synchronize(device)
    if distributed:
        torch.distributed.barrier()


def _save_checkpoint(path, epoch, module, optimizer, scaler, history):
    """Write the state after ``epoch`` to ``path`` atomically (a reader never
    sees half a file: it is written beside and renamed)."""
    state = {'epoch': epoch, 'model': module.state_dict(),
             'optimizer': optimizer.state_dict(), 'history': history}
    if scaler is not None:
        state['scaler'] = scaler.state_dict()
    tmp = f'{path}.tmp-{os.getpid()}'
    torch.save(state, tmp)
    os.replace(tmp, path)


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
