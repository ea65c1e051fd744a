"""Time to accuracy (beyond the book): the loop behind :func:`d2lzh.torch.train`'s
time-to-accuracy options, and :data:`FAST_RECIPE`, the option set measured
fastest from a cold start to 0.92 test accuracy on one H100
(``bench/bench_torch.py time_to_accuracy``; notebook 在现代GPU上把训练跑满).

    train_iter, test_iter = d2l.load_data_fashion_mnist(d2l.FAST_BATCH_SIZE,
                                                        device=d2l.try_gpu())
    torch.backends.cudnn.benchmark = False   # autotuning costs seconds at start
    history = d2l.train(d2l.resnet18(10), train_iter, test_iter, d2l.FAST_EPOCHS,
                        d2l.FAST_LR, d2l.try_gpu(), **d2l.FAST_RECIPE)
    history['reached']   # {'epoch', 'test_acc', 'seconds'} or None
"""
import time
import warnings

import torch
from torch import nn

from .book import synchronize
from .training import _amp_mode, _autocast, _capture_step, _eager_step, _lr_factor

__all__ = ['FAST_RECIPE', 'FAST_BATCH_SIZE', 'FAST_EPOCHS', 'FAST_LR']

# The option set of d2l.train measured fastest from a cold start to 0.92 test
# accuracy on one H100, for GPU-resident data (load_data_fashion_mnist(...,
# device=...)), batch size FAST_BATCH_SIZE, FAST_EPOCHS epochs, peak learning
# rate FAST_LR and torch.backends.cudnn.benchmark off. Each choice was measured
# on its own in bench/results/*-time-to-accuracy.json.
FAST_RECIPE = dict(amp=True, channels_last=True, cuda_graph=True, momentum=0.9,
                   nesterov=True, weight_decay=5e-4, lr_schedule='linear', warmup=0.2,
                   label_smoothing=0.1, target_accuracy=0.92, eval_from=2)
FAST_BATCH_SIZE, FAST_EPOCHS, FAST_LR = 512, 2, 0.1


class _FusedSGD:
    """SGD (momentum, Nesterov, weight decay) through PyTorch's own fused SGD
    kernel ``torch._fused_sgd_``: the update of ``torch.optim.SGD(fused=True)``,
    one kernel for all parameters, reading the learning rate from the
    one-element GPU tensor ``lr`` (a CUDA graph records the update and the rate
    can still change every step). Used on GPUs because building any
    ``torch.optim`` optimizer first imports TorchDynamo, which took about 3 s
    of a cold start on the H100 machine (bench/results/*-time-to-accuracy.json).
    """

    def __init__(self, params, lr, momentum=0.0, weight_decay=0.0, nesterov=False):
        self.params = [p for p in params if p.requires_grad]
        self.lr, self.momentum, self.weight_decay = lr, momentum, weight_decay
        self.nesterov, self.buffers = nesterov, None

    def zero_grad(self, set_to_none=True):
        for p in self.params:
            p.grad = None

    def step(self):
        grads = [p.grad for p in self.params]
        first = self.momentum != 0 and self.buffers is None
        if first:
            self.buffers = [torch.empty_like(g) for g in grads]
        with torch.no_grad():
            torch._fused_sgd_(self.params, grads, self.buffers if self.momentum else [],
                              weight_decay=self.weight_decay, momentum=self.momentum,
                              lr=self.lr, dampening=0.0, nesterov=self.nesterov,
                              maximize=False, is_first_step=first, grad_scale=None,
                              found_inf=None)


def _step_lrs(schedule, lr, num_epochs, steps_per_epoch, warmup):
    """The learning rate of every step, as a list of floats."""
    total = num_epochs * steps_per_epoch
    if schedule == 'linear':
        n_warm = int(round(warmup * total))
        return [lr * (s + 1) / n_warm if s < n_warm else lr * (total - s) / (total - n_warm)
                for s in range(total)]
    return [lr * _lr_factor(schedule, s // steps_per_epoch, num_epochs) for s in range(total)]


def check_options(num_epochs, lr_schedule, label_smoothing, warmup, target_accuracy,
                  eval_from):
    """Raise ValueError, naming the fix, for a time-to-accuracy option out of range."""
    if lr_schedule not in (None, 'cosine', 'linear'):
        raise ValueError(f"lr_schedule={lr_schedule!r} is not valid: use None, 'cosine' "
                         "or 'linear'")
    if not 0 <= label_smoothing < 1:
        raise ValueError(f'label_smoothing={label_smoothing!r}: use a value in [0, 1)')
    if not 0 <= warmup < 1:
        raise ValueError(f'warmup={warmup!r}: use a fraction of all steps in [0, 1)')
    if isinstance(num_epochs, bool) or not isinstance(num_epochs, int) or num_epochs < 1:
        raise ValueError(f'num_epochs={num_epochs!r}: use a positive whole number')
    if isinstance(eval_from, bool) or not isinstance(eval_from, int) or \
            not 1 <= eval_from <= num_epochs:
        raise ValueError(f'eval_from={eval_from!r}: use an epoch number from 1 to '
                         f'num_epochs={num_epochs}, or nothing would be evaluated')
    if target_accuracy is not None and not 0 < target_accuracy <= 1:
        raise ValueError(f'target_accuracy={target_accuracy!r}: use a value in (0, 1] '
                         'or None')


def train_to_accuracy(net, train_iter, test_iter, num_epochs, lr, device, *, amp,
                      channels_last, compile_model, cuda_graph, momentum, weight_decay,
                      lr_schedule, verbose, nesterov, label_smoothing, warmup,
                      target_accuracy, eval_from):
    """The loop of :func:`d2lzh.torch.train` with its time-to-accuracy options.

    Differences from the book's loop: the learning rate is set every step (on
    a GPU it is a one-element tensor read by the fused SGD update, so a
    changing rate needs no new CUDA-graph capture); the warm-up (the first
    step, or the eager warm-up steps and the capture) is timed apart from the
    epochs; the test set is evaluated only from epoch ``eval_from`` on, and
    training stops once ``target_accuracy`` is reached. Arguments, result and
    errors: see :func:`d2lzh.torch.train`.
    """
    called = time.perf_counter()
    device = torch.device(device)
    check_options(num_epochs, lr_schedule, label_smoothing, warmup, target_accuracy,
                  eval_from)
    on_gpu = device.type == 'cuda'
    mode = _amp_mode(device, amp)
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    net = net.to(device, memory_format=fmt)
    model = torch.compile(net) if compile_model else net
    use_graph = bool(cuda_graph) and on_gpu
    scaler = None
    lr_on_gpu = on_gpu and mode != 'fp16' and hasattr(torch, '_fused_sgd_')
    if lr_on_gpu:
        lr_now = torch.tensor(float(lr), device=device)
        optimizer = _FusedSGD(net.parameters(), lr_now, momentum, weight_decay, nesterov)
    else:
        if use_graph:
            warnings.warn('cuda_graph=True: ' + ('fp16 autocast with a GradScaler'
                          if mode == 'fp16' else 'this PyTorch has no fused SGD') +
                          ' cannot be recorded here; training with eager steps',
                          RuntimeWarning, stacklevel=3)
        use_graph = False
        optimizer = torch.optim.SGD(net.parameters(), lr=lr, momentum=momentum,
                                    weight_decay=weight_decay, nesterov=nesterov)
        if mode == 'fp16':
            scaler = torch.amp.GradScaler('cuda')
    loss_fn = nn.CrossEntropyLoss(label_smoothing=label_smoothing)
    lrs = _step_lrs(lr_schedule, lr, num_epochs, len(train_iter), warmup)

    def set_lr(value):
        if lr_on_gpu:
            lr_now.fill_(value)
        else:
            for group in optimizer.param_groups:
                group['lr'] = value

    def eager_step(X, y):
        return _eager_step(model, loss_fn, optimizer, scaler, X, y, device, mode,
                           cache_enabled=False)

    history = {'epoch_times': [], 'eval_times': [], 'test_acc': [], 'train_loss': [],
               'warmup_time': 0.0, 'reached': None, 'amp': mode or 'off', 'start_epoch': 0}
    graph = static = None
    step = examples = 0
    net.train()
    synchronize(device)
    start = time.perf_counter()
    X, y = next(iter(train_iter))  # the warm-up batch
    X = X.to(device, non_blocking=True, memory_format=fmt)
    y = y.to(device, non_blocking=True)
    set_lr(lrs[0])
    if use_graph:
        static = (X.clone(memory_format=fmt), y.clone())
        try:
            graph, loss = _capture_step(model, loss_fn, optimizer, *static, mode, warmup=True)
        except RuntimeError as err:  # e.g. an op that cannot be captured
            warnings.warn(f'cuda_graph=True: capturing the training step failed ({err}); '
                          'continuing without a CUDA graph', RuntimeWarning, stacklevel=3)
            use_graph = False
            torch.cuda.synchronize(device)
            optimizer.zero_grad(set_to_none=True)
    else:
        eager_step(X, y)
    synchronize(device)
    history['warmup_time'] = time.perf_counter() - start
    for epoch in range(num_epochs):
        net.train()
        start = time.perf_counter()
        total_loss = torch.zeros((), device=device)
        examples = 0
        for X, y in train_iter:
            X = X.to(device, non_blocking=True, memory_format=fmt)
            y = y.to(device, non_blocking=True)
            if use_graph and X.shape != static[0].shape:
                continue  # a smaller last batch cannot replay the graph
            set_lr(lrs[min(step, len(lrs) - 1)])
            if use_graph:
                static[0].copy_(X)
                static[1].copy_(y)
                graph.replay()
            else:
                loss = eager_step(X, y)
            total_loss += loss.detach() * y.shape[0]
            examples += y.shape[0]
            step += 1
        synchronize(device)
        history['epoch_times'].append(time.perf_counter() - start)
        history['train_loss'].append(total_loss.item() / max(examples, 1))
        acc = None
        if epoch + 1 >= eval_from and test_iter is not None:
            start = time.perf_counter()
            net.eval()
            correct, n = torch.zeros((), dtype=torch.int64, device=device), 0
            with torch.no_grad(), _autocast(device, mode, cache_enabled=False):
                for X, y in test_iter:
                    X = X.to(device, non_blocking=True, memory_format=fmt)
                    y = y.to(device, non_blocking=True)
                    correct += (model(X).argmax(dim=1) == y).sum()
                    n += y.shape[0]
            net.train()
            if n == 0:
                raise ValueError('train: test_iter yielded no examples')
            acc = correct.item() / n
            history['eval_times'].append(time.perf_counter() - start)
        history['test_acc'].append(acc)
        if verbose:
            acc_text = 'not evaluated' if acc is None else f'{acc:.3f}'
            print(f'epoch {epoch + 1}: loss {history["train_loss"][-1]:.3f}, test acc '
                  f'{acc_text}, {history["epoch_times"][-1]:.2f} s '
                  f'({examples / history["epoch_times"][-1]:.0f} images/s)')
        if acc is not None and target_accuracy is not None and acc >= target_accuracy:
            history['reached'] = {'epoch': epoch + 1, 'test_acc': acc,
                                  'seconds': time.perf_counter() - called}
            break
    if verbose and target_accuracy is not None and history['reached'] is None:
        print(f'test accuracy {target_accuracy} not reached in {num_epochs} epochs')
    history['examples'] = examples
    history['images_per_s'] = examples / min(history['epoch_times'])
    return history
