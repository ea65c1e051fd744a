"""The fast path (beyond the book; notebook 07): :func:`train_fast` trains as a
:class:`Recipe` says and returns a :class:`History`. :data:`FAST`, chosen to reach test
accuracy 0.92 soonest from a cold start on one H100, has these techniques; each row:
where it acts, and FAST without it in one cold process (FAST: 3 processes, 53,398
images/s, 0.92 after 9.14 s on average from the process start, 8.09-10.22 s; one run,
bench/results/NVIDIA-H100-80GB-HBM3-x1-2026-11-23-time-to-accuracy.json):

field            acts in             config without it          images/s  0.92 after
amp              TrainStep.autocast  recipe_fp32                  34,972  9.21 s
channels_last    train_fast          recipe_no_channels_last      25,741  11.26 s
cuda_graph       TrainStep._capture  recipe_eager                 45,010  8.84 s
fused_sgd        FusedSGD            recipe_torch_optim           53,527  13.60 s
nesterov         FusedSGD.step       recipe_no_nesterov           53,482  9.00 s
lr_schedule      learning_rates      recipe_cosine_per_epoch      53,412  never
label_smoothing  TrainStep._step     recipe_no_label_smoothing    53,558  8.43 s
batch_size       train_fast          recipe_bs256                 46,548  7.67 s
eval_from        _evaluate           recipe_eval_every_epoch      53,477  7.85 s

Within FAST's spread a figure tells nothing. Below it, one run each, not measured
again: batch 256, evaluating every epoch, weight decay 1e-4 (6.92 s; a value, not a
row). The model is not a field: without the biases that batch norm cancels,
``resnet18(10, conv_bias=False)`` reached 0.92 after 6.89 s against 7.78 s
(the same run's FAST, ...-2026-11-25-time-to-accuracy.json)."""
import dataclasses
import functools
import math
import os
import time
from collections import namedtuple

import torch
from torch.nn.parallel import DistributedDataParallel

from ..checks import check, flag_rules, real, whole
from .book import evaluate_accuracy, synchronize
from .step import AllReduceParallel, TrainStep, learning_rates
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
        """The ``Techniques(amp, fused_sgd, cuda_graph)`` of this recipe's step on
        ``device``. amp: None (fp32, e.g. on the CPU), 'bf16' or 'fp16' ('auto': bf16
        from compute capability 8.0, else fp16: no fused SGD, no graph)."""
        device = torch.device(device)
        amp = self.amp if device.type == 'cuda' else 'off'
        if amp == 'auto':
            amp = 'bf16' if torch.cuda.get_device_capability(device)[0] >= 8 else 'fp16'
        fp16 = amp == 'fp16'
        return Techniques(None if amp == 'off' else amp, self.fused_sgd and not fp16,
                    self.cuda_graph and not fp16 and device.type in graph_devices)


#: Measured fastest from a cold start to 0.92 on one H100 (ResNet-18, data on the GPU,
#: ``cudnn.benchmark`` off): the table at the head of this file.
FAST = Recipe(batch_size=512, epochs=2, lr=0.1, amp='auto', channels_last=True,
              cuda_graph=True, momentum=0.9, nesterov=True, weight_decay=5e-4, fused_sgd=True,
              lr_schedule='linear', lr_warmup=0.2, label_smoothing=0.1, eval_from=2,
              target_accuracy=0.92, time_startup=True)


_list = functools.partial(dataclasses.field, default_factory=list)


@dataclasses.dataclass
class History:
    """What :func:`train_fast` measured (the book's ``train`` returns the first five in a
    dict); ``h['test_acc']`` reads and writes a field as in that dict. Seconds are
    wall-clock, once the device (with DDP, every process) is done."""
    epoch_times: list = _list()  # seconds of each epoch
    train_loss: list = _list()  # mean loss of each epoch's batches
    test_acc: list = _list()  # None before recipe.eval_from
    examples: int = 0  # images of the last epoch (DDP: of all processes)
    images_per_s: float = 0.0  # examples / the fastest epoch's seconds
    eval_times: list = _list()  # seconds of each evaluation
    amp: str = 'off'  # 'bf16', 'fp16' or 'off'
    fused_sgd: bool = False  # the step used FusedSGD
    cuda_graph: bool = False  # it was replayed from a CUDA graph
    start_epoch: int = 0  # > 0: resumed from a checkpoint
    startup_s: float = 0.0  # recipe.time_startup: steps and capture before epoch 1
    reached: dict = None  # {'epoch', 'test_acc', 'seconds' since train_fast's call}
    world_size: int = 1  # the DDP worker's fields (rank 0, d2lzh.torch.ddp)
    backend: str = None  # 'nccl' or 'gloo'
    device: str = None  # the GPU's name or 'cpu'
    restart_count: int = 0  # torchrun's restarts before this attempt
    params_digest: list = None  # SHA-1 of each rank's parameters
    marks: dict = None  # time.time() at each stage's end

    def __getitem__(self, name):
        return vars(self)[name]

    def __setitem__(self, name, value):
        self[name]  # a KeyError for a name that is not a field
        setattr(self, name, value)


def _resume(recipe, module, step, device, verbose):
    """A new :class:`History`, or the one of ``recipe.checkpoint`` if that file exists (the
    model, optimizer and GradScaler loaded from it); ValueError for another optimizer's state."""
    history = History(amp=step.amp or 'off', fused_sgd=step.fused_sgd)
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
    history = History(**{**state['history'], 'start_epoch': state['epoch'] + 1})
    if verbose:
        print(f'从 {name} 接着训练：{recipe.epochs} 个迭代周期已完成 {history.start_epoch} 个'
              + ('，且已达到目标准确率' if history.reached else ''))
    return history


def _save(recipe, epoch, module, step, history):
    """Write the checkpoint of ``epoch``: to a temporary file, then renamed (never half a file)."""
    torch.save({'epoch': epoch, 'model': module.state_dict(),
                'history': dataclasses.asdict(history),
                'optimizer': step.optimizer.state_dict(), 'scaler': step.scaler.state_dict()},
               f'{recipe.checkpoint}.tmp')
    os.replace(f'{recipe.checkpoint}.tmp', recipe.checkpoint)


def _should_stop(acc, recipe, device, ddp):
    """Whether ``acc`` (None: not evaluated) reached the target; with DDP rank 0's
    answer, broadcast, so that every process stops after the same epoch."""
    stop = torch.tensor(int(None not in (acc, recipe.target_accuracy)
                            and acc >= recipe.target_accuracy), device=device)
    if ddp and recipe.target_accuracy is not None:
        torch.distributed.broadcast(stop, 0)
    return bool(stop)


def _evaluate(test_iter, model, step, device, history, epoch, recipe):
    """The test accuracy after ``epoch`` (None before ``recipe.eval_from`` or without
    test data), kept in ``history`` with its seconds."""
    if test_iter is None:
        return None
    acc, start = None, time.perf_counter()
    if epoch + 1 >= recipe.eval_from:
        with step.autocast():
            acc = evaluate_accuracy(test_iter, model, device)
        history.eval_times.append(time.perf_counter() - start)
    history.test_acc.append(acc)
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
    """Train as ``recipe`` says (beyond the book; arguments and timing of d2l.train). With DDP
    or AllReduceParallel: the wrapped model and this process's shard; rank 0 evaluates,
    decides when to stop, saves.
    Returns a :class:`History`. ValueError: batches of another size than recipe.batch_size,
    another optimizer's checkpoint."""
    called, device = time.perf_counter(), torch.device(device)
    size = getattr(train_iter, 'batch_size', recipe.batch_size)
    if size != recipe.batch_size:
        raise ValueError(f'train_iter 的批量大小是 {size}，recipe.batch_size 却是 '
                         f'{recipe.batch_size}：请按 recipe 的批量大小加载数据，或传入 '
                         f'dataclasses.replace(recipe, batch_size={size})')
    ddp = isinstance(net, (DistributedDataParallel, AllReduceParallel))
    fmt = recipe.memory_format
    module = net.module if ddp else net.to(device, memory_format=fmt)
    step, saves = TrainStep(net, recipe, device), not ddp or torch.distributed.get_rank() == 0
    history = _resume(recipe, module, step, device, verbose)
    lrs, n = learning_rates(recipe, len(train_iter)), len(train_iter)
    first = recipe.epochs if history.reached else history.start_epoch
    net.train()  # evaluate_accuracy puts it back in training mode

    def train_on(X, y, t):  # t: the step's place in the run, its index into lrs
        step.set_lr(lrs[min(t, len(lrs) - 1)])
        return step(X.to(device, non_blocking=True, memory_format=fmt),
                    y.to(device, non_blocking=True))

    if recipe.time_startup and first < recipe.epochs:  # the eager steps and the capture
        start = _sync(device, ddp, train_iter, first)
        train_on(*next(iter(train_iter)), first * n)
        history.startup_s = _sync(device, ddp) - start
    for epoch in range(first, recipe.epochs):
        start, total_loss, examples = _sync(device, ddp, train_iter, epoch), 0, 0
        for i, (X, y) in enumerate(train_iter):
            loss = train_on(X, y, epoch * n + i)
            if loss is not None:  # None: a smaller last batch that the graph cannot replay
                total_loss, examples = total_loss + loss.detach() * len(y), examples + len(y)
        history.epoch_times.append(_sync(device, ddp) - start)
        history.train_loss.append(float(total_loss) / max(examples, 1))
        history.examples = examples
        if isinstance(net, AllReduceParallel) and epoch + 1 >= recipe.eval_from:
            net.average_buffers()  # every process, before rank 0 evaluates
        acc = _evaluate(test_iter, module if ddp else step.model, step, device, history, epoch,
                        recipe)
        stop = _should_stop(acc, recipe, device, ddp)
        if stop:
            history.reached = {'epoch': epoch + 1, 'test_acc': acc,
                               'seconds': time.perf_counter() - called}
        if verbose:
            print_epoch(history, epoch, acc, examples, stop and recipe.target_accuracy)
        if recipe.checkpoint is not None and saves:
            _save(recipe, epoch, module, step, history)
        if stop:
            break
    history.cuda_graph = step.cuda_graph
    history.images_per_s = history.examples / min(history.epoch_times or [math.inf])
    return history
