"""The fast path (beyond the book; notebook 07): :func:`train_fast` trains as a :class:`Recipe`
says, the one settings object of its techniques (the DDP worker's, ``run_ddp``'s, bench/'s);
:data:`FAST` is the recipe measured fastest from a cold start to 0.92 on one H100."""
import dataclasses
import math
import os
import time
import warnings
from collections import namedtuple

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from ..checks import check, flag_rules, real, whole
from .book import evaluate_accuracy, synchronize
from .train import print_epoch


def option(default, help):
    """A dataclass field with a default and ``help`` (the torchrun worker's flag says it)."""
    return dataclasses.field(default=default, metadata={'help': help})


AMP, SCHEDULES = ('auto', 'bf16', 'fp16', 'off'), (None, 'cosine', 'linear')
Techniques = namedtuple('Techniques', 'amp fused_sgd cuda_graph')


@dataclasses.dataclass(frozen=True)
class Recipe:
    """How :func:`train_fast` trains (beyond the book): immutable, each field one technique;
    ``dataclasses.replace(d2l.FAST, epochs=3)`` changes fields. Raises ValueError, naming
    the fix, for a field of the wrong type or range, or two fields that do not go together."""
    batch_size: int = option(256, 'examples per step (per process with DDP)')
    epochs: int = option(4, 'passes over the training data')
    lr: float = option(0.1, 'learning rate (the peak of a schedule)')
    amp: str = option('auto', 'mixed precision on CUDA: auto (bf16 from compute capability '
                      '8.0 on, else fp16 + GradScaler), bf16, fp16 or off')
    channels_last: bool = option(True, 'NHWC memory format for the model and its inputs')
    compile: bool = option(False, 'torch.compile the model (the first epoch compiles)')
    cuda_graph: bool = option(False, 'replay the step from a CUDA graph (skips a short batch)')
    capture_after: int = option(None, 'eager steps before a capture (none: 3, DDP 11)')
    momentum: float = option(0.0, 'SGD momentum, in [0, 1)')
    nesterov: bool = option(False, 'Nesterov momentum (needs momentum > 0)')
    weight_decay: float = option(0.0, 'SGD weight decay')
    fused_sgd: bool = option(False, 'FusedSGD: the fused kernel, its rate a tensor a graph reads')
    lr_schedule: str = option(None, 'none: constant; cosine: per epoch, towards 0; linear: '
                              'per step, up over lr_warmup, down to 0')
    lr_warmup: float = option(0.0, "share of the steps over which 'linear' rises, in [0, 1)")
    label_smoothing: float = option(0.0, 'of the cross-entropy loss, in [0, 1)')
    eval_from: int = option(1, 'first epoch after which the test set is evaluated')
    target_accuracy: float = option(None, 'stop at the first epoch whose test accuracy '
                                    "(rank 0's) is >= this, in (0, 1]")
    time_startup: bool = option(False, 'one step (and capture) before epoch 1, as startup_s')
    checkpoint: str = option(None, 'file saved after each epoch (rank 0), resumed from')

    def __post_init__(self):
        if isinstance(self.checkpoint, os.PathLike):
            object.__setattr__(self, 'checkpoint', os.fspath(self.checkpoint))
        check(self, [
            ('batch_size', whole(self.batch_size, 1), '不小于 1 的整数'),
            ('epochs', whole(self.epochs, 1), '不小于 1 的整数'),
            ('lr', real(self.lr, 0, math.inf, '()'), '大于 0 的数'),
            ('amp', self.amp in AMP, f'以下之一：{AMP}'),
            *flag_rules(self),
            ('capture_after', self.capture_after is None or whole(self.capture_after, 1),
             '不小于 1 的整数或 None'),
            ('momentum', real(self.momentum, 0, 1), '区间 [0, 1) 中的数'),
            ('weight_decay', real(self.weight_decay, 0, math.inf), '不小于 0 的数'),
            ('lr_schedule', self.lr_schedule in SCHEDULES, f'以下之一：{SCHEDULES}'),
            ('lr_warmup', real(self.lr_warmup, 0, 1), '区间 [0, 1) 中的数'),
            ('label_smoothing', real(self.label_smoothing, 0, 1), '区间 [0, 1) 中的数'),
            ('eval_from', whole(self.eval_from, 1) and self.eval_from <= self.epochs,
             f'从 1 到 epochs={self.epochs} 的迭代周期，否则测试集一次也不会被评估'),
            ('target_accuracy', self.target_accuracy is None or
             real(self.target_accuracy, 0, 1, '(]'), '区间 (0, 1] 中的数或 None'),
            ('checkpoint', self.checkpoint is None or isinstance(self.checkpoint, str),
             '文件名或 None')])
        for ok, message in [
            (not self.nesterov or self.momentum > 0,
             'nesterov=True 要求 momentum > 0：请同时传入动量，例如 momentum=0.9'),
            (not self.lr_warmup or self.lr_schedule == 'linear', f'lr_warmup={self.lr_warmup} '
             "只对线性学习率调度起作用：请同时传入 lr_schedule='linear'，或者用 lr_warmup=0"),
            (not self.cuda_graph or self.lr_schedule != 'linear' or self.fused_sgd,
             "cuda_graph=True 与 lr_schedule='linear' 一起用时要 fused_sgd=True（CUDA 图把 "
             "torch.optim 的学习率录成常数），或者改用 lr_schedule='cosine'")]:
            if not ok:
                raise ValueError(message)

    @property
    def memory_format(self):
        """``torch.channels_last`` or ``torch.contiguous_format``, as ``channels_last`` says."""
        return torch.channels_last if self.channels_last else torch.contiguous_format

    def plan(self, device, graph_devices=('cuda',)):
        """The ``Techniques(amp, fused_sgd, cuda_graph)`` this recipe's step uses on ``device``,
        decided once for TrainStep and the DDP worker. amp: None (fp32, e.g. on the CPU), 'bf16'
        or 'fp16' ('auto': bf16 from compute capability 8.0, else fp16: no fused SGD, no graph)."""
        device = torch.device(device)
        amp = self.amp if device.type == 'cuda' else 'off'
        if amp == 'auto':
            amp = 'bf16' if torch.cuda.get_device_capability(device)[0] >= 8 else 'fp16'
        fp16 = amp == 'fp16'
        return Techniques(None if amp == 'off' else amp, self.fused_sgd and not fp16,
                    self.cuda_graph and not fp16 and device.type in graph_devices)


#: Measured fastest from a cold start to 0.92 on one H100 (ResNet-18, data on the GPU,
#: ``cudnn.benchmark`` off); each choice on its own in bench/results/*-time-to-accuracy.json.
#: The model is not a setting: ``resnet18(10, conv_bias=False)`` took 6.89 s there, not 7.78.
FAST = Recipe(batch_size=512, epochs=2, lr=0.1, amp='auto', channels_last=True,
              cuda_graph=True, momentum=0.9, nesterov=True, weight_decay=5e-4, fused_sgd=True,
              lr_schedule='linear', lr_warmup=0.2, label_smoothing=0.1, eval_from=2,
              target_accuracy=0.92, time_startup=True)


def learning_rates(recipe, steps_per_epoch):
    """Each step's learning rate (``recipe.epochs * steps_per_epoch`` floats)."""
    lr, total = recipe.lr, recipe.epochs * steps_per_epoch
    if recipe.lr_schedule == 'linear':
        warm = int(round(recipe.lr_warmup * total))
        return [lr * (s + 1) / warm if s < warm else lr * (total - s) / (total - warm)
                for s in range(total)]
    if recipe.lr_schedule == 'cosine':
        return [lr * 0.5 * (1 + math.cos(math.pi * (s // steps_per_epoch) / recipe.epochs))
                for s in range(total)]
    return [lr] * total


class FusedSGD:
    """SGD (momentum, Nesterov, weight decay) by ``torch._fused_sgd_``, the kernel of
    ``torch.optim.SGD(fused=True)``, at rate ``lr`` (kept in the tensor ``self.lr``, which a
    recorded graph reads), importing no torch.optim (TorchDynamo: about 3 s of a cold start).
    ``load_state_dict``: KeyError or ValueError for another optimizer's state."""

    def __init__(self, params, lr, momentum=0.0, weight_decay=0.0, nesterov=False):
        self.params, self.buffers = [p for p in params if p.requires_grad], None
        self.lr = torch.as_tensor(lr, device=self.params[0].device)
        self.momentum, self.weight_decay, self.nesterov = momentum, weight_decay, nesterov

    def state_dict(self):
        return {'fused_sgd_momentum_buffers': self.buffers}

    def load_state_dict(self, state):
        buffers = state['fused_sgd_momentum_buffers']
        if buffers is not None and [b.shape for b in buffers] != [p.shape for p in self.params]:
            raise ValueError('state 里动量缓冲区的形状与参数不符：请传入同一模型的 FusedSGD 状态')
        self.buffers = buffers and [b.to(p.device, p.dtype) for b, p in zip(buffers, self.params)]

    def zero_grad(self):
        for p in self.params:
            p.grad = None

    def step(self):
        grads, first = [p.grad for p in self.params], self.momentum and self.buffers is None
        if first:
            self.buffers = [torch.empty_like(g) for g in grads]
        with torch.no_grad():
            torch._fused_sgd_(self.params, grads, self.buffers if self.momentum else [],
                              weight_decay=self.weight_decay, momentum=self.momentum,
                              lr=self.lr, dampening=0.0, nesterov=self.nesterov, maximize=False,
                              is_first_step=bool(first), grad_scale=None, found_inf=None)


_CAPTURE_STREAMS = {}


def capture_stream(device):
    """The stream of ``device`` that records CUDA graphs and runs the eager steps before
    (a DDP model to be recorded is built there too), after the work queued so far."""
    if device not in _CAPTURE_STREAMS:
        _CAPTURE_STREAMS[device] = torch.cuda.Stream(device=device)
    _CAPTURE_STREAMS[device].wait_stream(torch.cuda.current_stream(device))
    return _CAPTURE_STREAMS[device]


class TrainStep:
    """A recipe's training step of ``net`` (or a DDP of it) on ``device``, eager or replayed
    from a CUDA graph (on ``graph_devices``), as :meth:`Recipe.plan` decides: ``amp``,
    ``fused_sgd``, ``cuda_graph`` (fp16 is neither fused nor recorded: a RuntimeWarning)."""
    graph_devices = ('cuda',)

    def __init__(self, net, recipe, device):
        self.device, self.rate, self.captures = torch.device(device), recipe.lr, 0
        self.amp, self.fused_sgd, self.cuda_graph = recipe.plan(self.device, self.graph_devices)
        if self.amp == 'fp16' and (recipe.fused_sgd or recipe.cuda_graph):
            warnings.warn(f'amp={recipe.amp!r} 在 {self.device} 上是带 GradScaler 的 fp16：这样的'
                          '一步在这里既不用融合 SGD，也不录成 CUDA 图；改用 torch.optim.SGD，'
                          '不录图地训练', RuntimeWarning, stacklevel=3)
        self.capture_after = recipe.capture_after or \
            (11 if isinstance(net, DistributedDataParallel) else 3)
        sgd = {'momentum': recipe.momentum, 'weight_decay': recipe.weight_decay,
               'nesterov': recipe.nesterov}
        self.optimizer = (FusedSGD if self.fused_sgd else torch.optim.SGD)(
            net.parameters(), self.rate, **sgd)
        self.scaler = torch.amp.GradScaler('cuda', enabled=self.amp == 'fp16')  # off: passes through
        self.model = torch.compile(net) if recipe.compile else net
        self.loss_fn = nn.CrossEntropyLoss(label_smoothing=recipe.label_smoothing)
        self.graph = self.static = self.loss = None

    def autocast(self, cache_enabled=True):
        """The autocast context of this step's ``amp`` (disabled for fp32)."""
        return torch.autocast('cuda', torch.bfloat16 if self.amp == 'bf16' else torch.float16,
                              enabled=self.amp is not None, cache_enabled=cache_enabled)

    def set_lr(self, value):
        """Train at rate ``value`` from the next step on (the fused update reads its tensor;
        a graph holds torch.optim's rate as a constant: a new one means a new capture)."""
        if value != self.rate:
            self.rate = value
            if self.fused_sgd:
                self.optimizer.lr.fill_(value)
            else:
                for group in self.optimizer.param_groups:
                    group['lr'] = value
                self.graph = None

    def __call__(self, X, y):
        """Train on ``(X, y)`` (on the device); return the loss (0-d tensor), or None for a
        batch that the recorded graph cannot replay (a smaller last batch: skipped)."""
        if not self.cuda_graph:
            return self._step(X, y)
        self.static = self.static or (X.clone(), y.clone())
        if X.shape != self.static[0].shape:
            return None
        for static, new in zip(self.static, (X, y)):
            static.copy_(new)
        if self.graph is None:
            try:
                self.graph, self.loss = self._capture(*self.static)
            except RuntimeError as err:  # e.g. an operation that cannot be captured
                warnings.warn(f'cuda_graph=True：录制训练步骤失败（{err}）；不用 CUDA 图'
                              '继续训练', RuntimeWarning, stacklevel=2)
                self.cuda_graph = False
                synchronize(self.device)
                return self._step(X, y)
        self.graph.replay()
        return self.loss

    def _step(self, X, y, cache_enabled=True):
        self.optimizer.zero_grad()
        with self.autocast(cache_enabled):
            loss = self.loss_fn(self.model(X), y)
        self.scaler.scale(loss).backward()
        self.scaler.step(self.optimizer)
        self.scaler.update()
        return loss

    def _capture(self, X, y):
        # PyTorch's CUDA-graph notes: before the first capture, eager steps (real updates) on
        # the recording stream let cuDNN pick algorithms, the optimizer and DDP make state
        stream = capture_stream(self.device)
        with torch.cuda.stream(stream):
            for _ in range(0 if self.captures else self.capture_after):
                self._step(X, y, cache_enabled=False)
        self.captures, graph = self.captures + 1, torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=stream):
            loss = self._step(X, y, cache_enabled=False)
        torch.cuda.current_stream(self.device).wait_stream(stream)
        return graph, loss


def _resume(recipe, module, step, device, verbose):
    """A new history, or the one of ``recipe.checkpoint`` if that file exists (the model,
    optimizer and GradScaler loaded from it); ValueError for another optimizer's state."""
    history = {'epoch_times': [], 'eval_times': [], 'test_acc': [], 'train_loss': [],
               'examples': 0, 'amp': step.amp or 'off', 'fused_sgd': step.fused_sgd,
               'start_epoch': 0, 'startup_s': 0.0, 'reached': None}
    if recipe.checkpoint is None or not os.path.exists(recipe.checkpoint):
        return history
    state = torch.load(recipe.checkpoint, map_location=device, weights_only=True)
    name = os.path.basename(recipe.checkpoint)
    module.load_state_dict(state['model'])
    try:
        step.optimizer.load_state_dict(state['optimizer'])
    except (KeyError, ValueError, TypeError) as err:
        raise ValueError(f'{name} 存的是另一种优化器的状态（{type(err).__name__}: {err}）：'
                         '请传入写出它时的 recipe（fused_sgd、momentum），'
                         '或者把它移走、从头训练') from err
    if state.get('scaler'):  # fp16's GradScaler; {} when disabled
        step.scaler.load_state_dict(state['scaler'])
    history = {**history, **state['history'], 'start_epoch': state['epoch'] + 1}
    if verbose:
        print(f'从 {name} 接着训练：{recipe.epochs} 个迭代周期已完成 {history["start_epoch"]} 个'
              + ('，且已达到目标准确率' if history['reached'] else ''))
    return history


def _save(recipe, epoch, module, step, history):
    """Write the checkpoint of ``epoch``: to a temporary file, then renamed (never half a file)."""
    torch.save({'epoch': epoch, 'model': module.state_dict(), 'history': history,
                'optimizer': step.optimizer.state_dict(), 'scaler': step.scaler.state_dict()},
               f'{recipe.checkpoint}.tmp')
    os.replace(f'{recipe.checkpoint}.tmp', recipe.checkpoint)


def _should_stop(acc, recipe, device, ddp):
    """Whether the test accuracy ``acc`` (None: not evaluated) reached the recipe's target;
    with DDP rank 0's answer, broadcast, so that every process stops after the same epoch."""
    stop = torch.tensor(int(None not in (acc, recipe.target_accuracy)
                            and acc >= recipe.target_accuracy), device=device)
    if ddp and recipe.target_accuracy is not None:
        torch.distributed.broadcast(stop, 0)
    return bool(stop)


def _evaluate(test_iter, model, step, device, history, epoch, recipe):
    """The test accuracy after ``epoch`` (None before ``recipe.eval_from`` or without test
    data), appended to ``history['test_acc']`` (with test data), its seconds to ``eval_times``."""
    if test_iter is None:
        return None
    acc, start = None, time.perf_counter()
    if epoch + 1 >= recipe.eval_from:
        with step.autocast():
            acc = evaluate_accuracy(test_iter, model, device)
        history['eval_times'].append(time.perf_counter() - start)
    history['test_acc'].append(acc)
    return acc


def _sync(device, ddp, data_iter=None, epoch=None):
    """(Set the data's epoch,) wait for the device and every process; returns the time."""
    if epoch is not None and hasattr(data_iter, 'set_epoch'):
        data_iter.set_epoch(epoch)
    synchronize(device)
    if ddp:
        torch.distributed.barrier()
    return time.perf_counter()


def train_fast(net, train_iter, test_iter, device, recipe=FAST, verbose=True):
    """Train as ``recipe`` says (beyond the book; arguments and timing of d2l.train). With DDP:
    the wrapped model and this process's shard; rank 0 evaluates, decides when to stop, saves.
    Returns train's history with eval_times, amp, cuda_graph, fused_sgd, startup_s, start_epoch,
    reached (None or {'epoch', 'test_acc', 'seconds'}). ValueError: batches of another size
    than recipe.batch_size, another optimizer's checkpoint."""
    called, device = time.perf_counter(), torch.device(device)
    size = getattr(train_iter, 'batch_size', recipe.batch_size)
    if size != recipe.batch_size:
        raise ValueError(f'train_iter 的批量大小是 {size}，recipe.batch_size 却是 '
                         f'{recipe.batch_size}：请按 recipe 的批量大小加载数据，或传入 '
                         f'dataclasses.replace(recipe, batch_size={size})')
    ddp, fmt = isinstance(net, DistributedDataParallel), recipe.memory_format
    module = net.module if ddp else net.to(device, memory_format=fmt)
    step, saves = TrainStep(net, recipe, device), not ddp or torch.distributed.get_rank() == 0
    history = _resume(recipe, module, step, device, verbose)
    lrs, n = learning_rates(recipe, len(train_iter)), len(train_iter)
    first = recipe.epochs if history['reached'] else history['start_epoch']
    net.train()  # evaluate_accuracy puts it back in training mode

    def train_on(X, y, t):  # t: the step's place in the run, its index into lrs
        step.set_lr(lrs[min(t, len(lrs) - 1)])
        return step(X.to(device, non_blocking=True, memory_format=fmt),
                    y.to(device, non_blocking=True))

    if recipe.time_startup and first < recipe.epochs:  # the eager steps and the capture
        start = _sync(device, ddp, train_iter, first)
        train_on(*next(iter(train_iter)), first * n)
        history['startup_s'] = _sync(device, ddp) - start
    for epoch in range(first, recipe.epochs):
        start, total_loss, examples = _sync(device, ddp, train_iter, epoch), 0, 0
        for i, (X, y) in enumerate(train_iter):
            loss = train_on(X, y, epoch * n + i)
            if loss is not None:  # None: a smaller last batch that the graph cannot replay
                total_loss, examples = total_loss + loss.detach() * len(y), examples + len(y)
        history['epoch_times'].append(_sync(device, ddp) - start)
        history['train_loss'].append(float(total_loss) / max(examples, 1))
        history['examples'] = examples
        acc = _evaluate(test_iter, module if ddp else step.model, step, device, history, epoch,
                        recipe)
        stop = _should_stop(acc, recipe, device, ddp)
        if stop:
            history['reached'] = {'epoch': epoch + 1, 'test_acc': acc,
                                  'seconds': time.perf_counter() - called}
        if verbose:
            print_epoch(history, epoch, acc, examples, stop and recipe.target_accuracy)
        if recipe.checkpoint is not None and saves:
            _save(recipe, epoch, module, step, history)
        if stop:
            break
    history['cuda_graph'] = step.cuda_graph
    history['images_per_s'] = history['examples'] / min(history['epoch_times'] or [math.inf])
    return history
