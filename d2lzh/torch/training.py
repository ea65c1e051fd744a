"""Training loops of the PyTorch edition (book 8.5 and beyond): ``train``, the
one epoch loop, on one device or in every DistributedDataParallel process,
with the options of the notebook 在现代 GPU 上把训练跑满 (bf16, channels_last,
torch.compile, the whole step as a CUDA graph, SGD momentum, cosine or linear
schedule, checkpoints, and the time-to-accuracy options: early stop at a
target accuracy, start-up timed apart), and ``train_data_parallel``
(``nn.DataParallel``).
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
    GradScaler when ``scaler`` is not None); returns the loss tensor."""
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
    raise ValueError(f"lr_schedule={schedule!r} has no factor per epoch: use None or "
                     "'cosine' here ('linear' changes the rate every step)")


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


def _record_graphs(device):
    """Whether CUDA graphs can be recorded on ``device`` (CUDA only). A seam
    for the tests, which replace it and :func:`_capture_step` to run the
    loop's graph bookkeeping on the CPU."""
    return device.type == 'cuda'


def _step_lrs(schedule, lr, num_epochs, steps_per_epoch, warmup):
    """The learning rate of every step (a list of ``num_epochs *
    steps_per_epoch`` floats) for ``schedule`` None, 'cosine' (one value per
    epoch) or 'linear' (warm-up over the first ``warmup`` fraction of the
    steps, then linear decay to 0)."""
    total = num_epochs * steps_per_epoch
    if schedule == 'linear':
        n_warm = int(round(warmup * total))
        return [lr * (s + 1) / n_warm if s < n_warm else lr * (total - s) / (total - n_warm)
                for s in range(total)]
    return [lr * _lr_factor(schedule, s // steps_per_epoch, num_epochs) for s in range(total)]


def _check_options(num_epochs, lr_schedule, momentum, nesterov, label_smoothing, warmup,
                   target_accuracy, eval_from):
    """Raise ValueError, naming the fix, for an option of :func:`train` out of range."""
    if lr_schedule not in (None, 'cosine', 'linear'):
        raise ValueError(f"lr_schedule={lr_schedule!r} is not valid: use None, 'cosine' "
                         "or 'linear'")
    if isinstance(num_epochs, bool) or not isinstance(num_epochs, int) or num_epochs < 1:
        raise ValueError(f'num_epochs={num_epochs!r}: use a positive whole number')
    if nesterov and not momentum:
        raise ValueError('nesterov=True needs momentum > 0 (Nesterov momentum without '
                         'momentum is plain SGD): pass momentum=0.9, for example')
    if not 0 <= label_smoothing < 1:
        raise ValueError(f'label_smoothing={label_smoothing!r}: use a value in [0, 1)')
    if not 0 <= warmup < 1:
        raise ValueError(f'warmup={warmup!r}: use a fraction of all steps in [0, 1)')
    if warmup and lr_schedule != 'linear':
        raise ValueError(f"warmup={warmup!r} is used by lr_schedule='linear' only: pass "
                         "lr_schedule='linear' or leave warmup out")
    if isinstance(eval_from, bool) or not isinstance(eval_from, int) or \
            not 1 <= eval_from <= num_epochs:
        raise ValueError(f'eval_from={eval_from!r}: use an epoch number from 1 to '
                         f'num_epochs={num_epochs}, or nothing would be evaluated')
    if target_accuracy is not None and not 0 < target_accuracy <= 1:
        raise ValueError(f'target_accuracy={target_accuracy!r}: use a value in (0, 1] '
                         'or None')


def train(net, train_iter, test_iter, num_epochs, lr, device, amp=False,
          channels_last=False, compile_model=False, cuda_graph=False, momentum=0.0,
          weight_decay=0.0, lr_schedule=None, verbose=True, checkpoint=None, *,
          nesterov=False, label_smoothing=0.0, warmup=0.0, target_accuracy=None,
          eval_from=1):
    """Train a classifier with SGD and cross-entropy on one device (book 8.5).

    With the defaults this is the book's loop: fp32, plain SGD at a constant
    learning rate, one Python-driven step per batch. The options add the
    techniques of the notebook "在现代 GPU 上把训练跑满". Each epoch is timed from
    its first batch to a synchronisation after its last; the test-set
    evaluation after it is timed separately.

    This is also the loop of every DistributedDataParallel process
    (:mod:`d2lzh.torch.distributed`): pass a model wrapped in
    ``DistributedDataParallel`` (already on ``device``, in the memory format
    that ``channels_last`` asks for) and each process's own shard as
    ``train_iter``. Then every epoch starts and ends with a barrier of the
    process group, the test set is evaluated on the wrapped module (no
    collective; a process may pass ``test_iter=None``), rank 0's decision to
    stop at ``target_accuracy`` is broadcast to all, and only rank 0 writes
    the checkpoint. An iterator with a ``set_epoch(epoch)`` method is told
    the epoch before each pass.

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
            first capture). A learning rate held as a Python number is
            recorded into the graph: when it changes (``'cosine'``: once per
            epoch) the step is captured again. Graphs are recorded with bf16
            or fp32 only: with fp16 (GradScaler), or with a per-step rate
            that is not in a GPU tensor (see the time-to-accuracy options),
            the steps run eagerly, with a RuntimeWarning. If a capture fails,
            a RuntimeWarning names the cause and training goes on with eager
            steps.
        momentum (float): SGD momentum.
        weight_decay (float): SGD weight decay.
        lr_schedule (None, 'cosine' or 'linear'): constant; cosine decay with
            one learning rate per epoch; or (a time-to-accuracy option, see
            below) linear warm-up over the first ``warmup`` fraction of all
            steps, then linear decay to 0 at the last step.
        verbose (bool): print one line per epoch.
        checkpoint (str or os.PathLike or None): a file written after every
            epoch (model, optimizer, history; atomically). If it exists when
            training starts, training resumes after the epoch it holds.

    Time-to-accuracy options (beyond the book; keyword only). Any of them, or
    ``lr_schedule='linear'``, also turns on two things measured for a cold
    start: the start-up (the first step, or the eager warm-up steps and the
    first capture; real updates on the first batch) runs before the first
    epoch and is timed apart as ``history['warmup_time']``; and on a GPU
    with bf16 or fp32 the SGD update is PyTorch's fused kernel with the
    learning rate in a one-element GPU tensor (:class:`d2lzh.torch.fast.
    _FusedSGD`: no ``torch.optim`` import, about 3 s of a cold start, and a
    per-step rate inside a CUDA graph). ``d2l.FAST_RECIPE`` is the set
    measured fastest to 0.92 (with ``FAST_BATCH_SIZE``, ``FAST_EPOCHS``,
    ``FAST_LR``).

        nesterov (bool): Nesterov momentum (needs ``momentum`` > 0).
        label_smoothing (float): in [0, 1), of the cross-entropy loss.
        warmup (float): fraction of all steps in [0, 1) (with 'linear').
        target_accuracy (float or None): stop after the first evaluated
            epoch whose test accuracy is >= this. If it is never reached,
            all ``num_epochs`` run and ``history['reached']`` is None.
        eval_from (int): evaluate only after epochs ``eval_from`` ..
            ``num_epochs`` (1: every epoch); the others record None in
            ``test_acc``.

    Returns:
        dict: ``epoch_times`` (s), ``eval_times`` (s, one per evaluation),
        ``test_acc`` (per epoch; None where not evaluated) and ``train_loss``
        (per epoch), ``examples`` (trained on per epoch, by this process),
        ``images_per_s`` (fastest epoch, this process), ``amp`` ('bf16',
        'fp16' or 'off'), ``start_epoch`` (0, or the epoch resumed at from
        ``checkpoint``), ``warmup_time`` (s; 0.0 unless the start-up is
        timed apart) and ``reached`` (None, or ``{'epoch', 'test_acc',
        'seconds'}`` with seconds since ``train`` was called).

    Raises:
        ValueError: an option out of range (unknown ``lr_schedule`` or
            ``amp``, ``nesterov`` without momentum, ...), a
            DistributedDataParallel model whose parameters are not on
            ``device``, a ``checkpoint`` written with other optimizer
            options, or a ``test_iter`` that yields no example.
    """
    called = time.perf_counter()
    device = torch.device(device)
    _check_options(num_epochs, lr_schedule, momentum, nesterov, label_smoothing, warmup,
                   target_accuracy, eval_from)
    apart = bool(lr_schedule == 'linear' or nesterov or label_smoothing or warmup
                 or target_accuracy is not None or eval_from != 1)
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
    fused = (apart and device.type == 'cuda' and mode != 'fp16'
             and hasattr(torch, '_fused_sgd_'))
    use_graph = bool(cuda_graph) and _record_graphs(device)
    if use_graph and (mode == 'fp16' or (lr_schedule == 'linear' and not fused)):
        why = ('with fp16 autocast a GradScaler step' if mode == 'fp16' else
               "a learning rate that changes every step (lr_schedule='linear') without "
               'a fused SGD in this PyTorch')
        warnings.warn(f'cuda_graph=True: {why} is not recorded in a CUDA graph here; '
                      'training with eager steps', RuntimeWarning, stacklevel=2)
        use_graph = False
    scaler = torch.amp.GradScaler('cuda') if mode == 'fp16' else None
    model = torch.compile(net) if compile_model else net
    if fused:
        from .fast import _FusedSGD
        lr_tensor = torch.tensor(float(lr), device=device)
        optimizer = _FusedSGD(net.parameters(), lr_tensor, momentum, weight_decay, nesterov)
    else:
        optimizer = torch.optim.SGD(net.parameters(), lr=lr, momentum=momentum,
                                    weight_decay=weight_decay, nesterov=nesterov)
    loss_fn = nn.CrossEntropyLoss(label_smoothing=label_smoothing)
    eval_net = module if distributed else model
    rank = torch.distributed.get_rank() if distributed else 0
    history = {'epoch_times': [], 'eval_times': [], 'test_acc': [], 'train_loss': [],
               'amp': mode or 'off', 'start_epoch': 0, 'warmup_time': 0.0, 'reached': None}
    if verbose and amp and device.type == 'cuda':
        print(f'amp: {_amp_description(device, mode)}')
    if checkpoint is not None and os.path.exists(checkpoint):
        history = _load_checkpoint(checkpoint, device, module, optimizer, scaler, history)
        if verbose:
            print(f'resuming from {os.path.basename(checkpoint)}: epoch '
                  f'{history["start_epoch"]} of {num_epochs} done' +
                  (' and the target accuracy reached' if history['reached'] else ''))
    first_epoch = num_epochs if history['reached'] else history['start_epoch']
    steps_per_epoch = len(train_iter) if lr_schedule == 'linear' else 0
    lrs = _step_lrs(lr_schedule, lr, num_epochs, steps_per_epoch, warmup) \
        if lr_schedule == 'linear' else None
    state = {'lr': float(lr), 'graph': None, 'static': None, 'loss': None,
             'use_graph': use_graph, 'warmed': False}

    def set_lr(epoch, step):
        value = lrs[min(step, len(lrs) - 1)] if lrs is not None else \
            lr * _lr_factor(lr_schedule, epoch, num_epochs)
        if value == state['lr']:
            return
        state['lr'] = value
        if fused:
            lr_tensor.fill_(value)  # read by the recorded update: no new capture
        else:
            for group in optimizer.param_groups:
                group['lr'] = value
            state['graph'] = None  # the Python number is baked into a recorded graph

    def one_step(X, y):
        """Train on one batch; returns the loss tensor, or None for a batch
        that the graph cannot replay (a smaller last batch)."""
        if state['use_graph']:
            if state['static'] is None:
                state['static'] = (X.clone(memory_format=fmt), y.clone())
            static = state['static']
            if X.shape != static[0].shape:
                return None
            static[0].copy_(X)
            static[1].copy_(y)
            if state['graph'] is None:
                try:  # DDP asks for 11 eager steps before a capture
                    state['graph'], state['loss'] = _capture_step(
                        model, loss_fn, optimizer, *static, mode, warmup=not state['warmed'],
                        warmup_steps=11 if distributed else 3)
                    state['warmed'] = True
                except RuntimeError as err:  # e.g. an op that cannot be captured
                    warnings.warn(f'cuda_graph=True: capturing the training step failed '
                                  f'({err}); continuing without a CUDA graph',
                                  RuntimeWarning, stacklevel=3)
                    state['use_graph'], state['graph'] = False, None
                    synchronize(device)
                    optimizer.zero_grad(set_to_none=True)
            if state['graph'] is not None:
                state['graph'].replay()
                return state['loss']
        return _eager_step(model, loss_fn, optimizer, scaler, X, y, device, mode)

    step = first_epoch * steps_per_epoch
    if apart and first_epoch < num_epochs:  # the start-up, timed apart from the epochs
        if hasattr(train_iter, 'set_epoch'):
            train_iter.set_epoch(first_epoch)
        net.train()
        _sync(device, distributed)
        start = time.perf_counter()
        X, y = next(iter(train_iter))
        set_lr(first_epoch, step)
        one_step(X.to(device, non_blocking=True, memory_format=fmt),
                 y.to(device, non_blocking=True))
        _sync(device, distributed)
        history['warmup_time'] = time.perf_counter() - start
    examples = history.get('examples', 0)
    for epoch in range(first_epoch, num_epochs):
        set_lr(epoch, step)
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
            set_lr(epoch, step)
            loss = one_step(X, y)
            if loss is None:
                continue  # a smaller last batch cannot replay the graph
            total_loss += loss.detach() * y.shape[0]
            examples += y.shape[0]
            step += 1
        _sync(device, distributed)
        history['epoch_times'].append(time.perf_counter() - start)
        history['train_loss'].append(total_loss.item() / max(examples, 1))
        history['examples'] = examples
        acc = None
        if test_iter is not None and epoch + 1 >= eval_from:
            start = time.perf_counter()
            with _autocast(device, mode):
                acc = evaluate_accuracy(test_iter, eval_net, device)
            history['eval_times'].append(time.perf_counter() - start)
        if test_iter is not None:
            history['test_acc'].append(acc)
        stop = _target_reached(acc, target_accuracy, device, distributed)
        if stop:
            history['reached'] = {'epoch': epoch + 1, 'test_acc': acc,
                                  'seconds': time.perf_counter() - called}
        if verbose:
            acc_text = '' if test_iter is None else ', test acc not evaluated' \
                if acc is None else f', test acc {acc:.3f}'
            print(f'epoch {epoch + 1}: loss {history["train_loss"][-1]:.3f}{acc_text}, '
                  f'{history["epoch_times"][-1]:.2f} s '
                  f'({examples / history["epoch_times"][-1]:.0f} images/s)')
        if checkpoint is not None and rank == 0:
            _save_checkpoint(checkpoint, epoch, module, optimizer, scaler, history)
        if stop:
            break
    if verbose and target_accuracy is not None and history['reached'] is None:
        print(f'test accuracy {target_accuracy} not reached in {num_epochs} epochs')
    history['examples'] = examples
    history['images_per_s'] = examples / min(history['epoch_times']) \
        if history['epoch_times'] else 0.0
    return history


def _target_reached(acc, target, device, distributed):
    """Whether training stops here: ``acc`` (None if not evaluated) >=
    ``target``; with DistributedDataParallel, rank 0's answer, broadcast so
    that every process stops after the same epoch."""
    if target is None:
        return False
    reached = acc is not None and acc >= target
    if distributed:
        flag = torch.tensor([int(reached)], device=device)
        torch.distributed.broadcast(flag, 0)
        reached = bool(flag.item())
    return reached


def _sync(device, distributed):
    """Wait for the device; with DistributedDataParallel, also for every process."""
    synchronize(device)
    if distributed:
        torch.distributed.barrier()


def _load_checkpoint(path, device, module, optimizer, scaler, history):
    """Load the state that :func:`_save_checkpoint` wrote into ``module``,
    ``optimizer`` and ``scaler``; return the saved history (on top of the
    keys of ``history``) with ``start_epoch`` set. The file is only read."""
    state = torch.load(path, map_location=device, weights_only=True)
    module.load_state_dict(state['model'])
    try:
        optimizer.load_state_dict(state['optimizer'])
    except (KeyError, ValueError, TypeError) as err:
        raise ValueError(f'{os.path.basename(path)} holds the state of another optimizer '
                         f'({type(err).__name__}: {err}): it was written by train() with other '
                         'options; pass the same options again, or move the file away to '
                         'start afresh') from err
    if scaler is not None and 'scaler' in state:
        scaler.load_state_dict(state['scaler'])
    loaded = {**history, **state['history']}
    loaded['start_epoch'] = state['epoch'] + 1
    return loaded


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
