"""The fast path's training step (beyond the book; notebook 07): :class:`TrainStep`,
eager or replayed from a CUDA graph, :class:`FusedSGD`, :func:`learning_rates`; data
parallelism by DDP (:func:`data_parallel`) or :class:`AllReduceParallel`."""
import math
import os
import warnings

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from .book import synchronize


class FusedSGD:
    """SGD (momentum, Nesterov, weight decay) by ``torch._fused_sgd_``, the kernel of
    ``torch.optim.SGD(fused=True)``, its rate the tensor ``self.lr`` (which a graph
    reads), without torch.optim's import of TorchDynamo. ``load_state_dict``: KeyError
    or ValueError for another optimizer's state."""

    def __init__(self, params, lr, momentum=0.0, weight_decay=0.0, nesterov=False):
        self.params, self.buffers = [p for p in params if p.requires_grad], None
        self.lr = torch.as_tensor(lr, device=self.params[0].device)
        self.momentum, self.weight_decay = momentum, weight_decay
        self.nesterov = nesterov

    def state_dict(self):
        return {'fused_sgd_momentum_buffers': self.buffers}

    def load_state_dict(self, state):
        buffers = state['fused_sgd_momentum_buffers']
        shapes = [p.shape for p in self.params]
        if buffers is not None and [b.shape for b in buffers] != shapes:
            raise ValueError('state 里动量缓冲区的形状与参数不符：'
                             '请传入同一模型的 FusedSGD 状态')
        self.buffers = buffers and [b.to(p.device, p.dtype)
                                    for b, p in zip(buffers, self.params)]

    def zero_grad(self):
        for p in self.params:
            p.grad = None

    def step(self):
        grads = [p.grad for p in self.params]
        first = self.momentum and self.buffers is None
        if first:
            self.buffers = [torch.empty_like(g) for g in grads]
        with torch.no_grad():
            torch._fused_sgd_(
                self.params, grads, self.buffers if self.momentum else [],
                weight_decay=self.weight_decay, momentum=self.momentum, lr=self.lr,
                dampening=0.0, nesterov=self.nesterov, maximize=False,
                is_first_step=bool(first), grad_scale=None, found_inf=None)


def learning_rates(recipe, steps_per_epoch):
    """Each step's learning rate (``recipe.epochs * steps_per_epoch`` floats)."""
    lr, epochs = recipe.lr, recipe.epochs
    total = epochs * steps_per_epoch
    if recipe.lr_schedule == 'linear':
        warm = int(round(recipe.lr_warmup * total))
        return [lr * (s + 1) / warm if s < warm else lr * (total - s) / (total - warm)
                for s in range(total)]
    if recipe.lr_schedule == 'cosine':  # per epoch
        return [lr * 0.5 * (1 + math.cos(math.pi * (s // steps_per_epoch) / epochs))
                for s in range(total)]
    return [lr] * total


_CAPTURE_STREAMS = {}
DDP_EAGER_STEPS = 11  # see data_parallel


def capture_stream(device):
    """The stream of ``device`` that records CUDA graphs (and the eager steps before),
    after the work queued so far."""
    if device not in _CAPTURE_STREAMS:
        _CAPTURE_STREAMS[device] = torch.cuda.Stream(device=device)
    _CAPTURE_STREAMS[device].wait_stream(torch.cuda.current_stream(device))
    return _CAPTURE_STREAMS[device]


class TrainStep:
    """A recipe's training step of ``net`` (or its DDP or AllReduceParallel) on
    ``device``, eager or replayed from a CUDA graph (on ``graph_devices``), as
    :meth:`Recipe.plan` decides (fp16 is neither fused nor recorded: a RuntimeWarning).
    The eager steps before a capture train on the first batch."""
    graph_devices = ('cuda',)

    def __init__(self, net, recipe, device):
        self.device, self.rate, self.captures = torch.device(device), recipe.lr, 0
        self.amp, self.fused_sgd, self.cuda_graph = recipe.plan(self.device,
                                                                self.graph_devices)
        if self.amp == 'fp16' and (recipe.fused_sgd or recipe.cuda_graph):
            warnings.warn(f'amp={recipe.amp!r} 在 {self.device} 上是带 GradScaler 的 fp16：'
                          '这样的一步在这里既不用融合 SGD，也不录成 CUDA 图；改用 '
                          'torch.optim.SGD，不录图地训练', RuntimeWarning, stacklevel=3)
        least = DDP_EAGER_STEPS if isinstance(net, DistributedDataParallel) else 1
        self.capture_after = max(recipe.capture_after or 3, least)
        sgd = FusedSGD if self.fused_sgd else torch.optim.SGD
        self.optimizer = sgd(net.parameters(), self.rate, momentum=recipe.momentum,
                             weight_decay=recipe.weight_decay, nesterov=recipe.nesterov)
        # a disabled GradScaler passes all through
        self.scaler = torch.amp.GradScaler('cuda', enabled=self.amp == 'fp16')
        self.model = torch.compile(net) if recipe.compile else net
        self.allreduce = getattr(net, 'allreduce_grads', None)
        self.loss_fn = nn.CrossEntropyLoss(label_smoothing=recipe.label_smoothing)
        self.graph = self.static = self.loss = None

    def autocast(self, cache_enabled=True):
        """The autocast context of this step's ``amp`` (disabled for fp32)."""
        dtype = torch.bfloat16 if self.amp == 'bf16' else torch.float16
        return torch.autocast('cuda', dtype, enabled=self.amp is not None,
                              cache_enabled=cache_enabled)

    def set_lr(self, value):
        """Train at rate ``value`` from the next step on (torch.optim's rate is a
        constant in a graph: recorded again)."""
        if value != self.rate:
            self.rate = value
            if self.fused_sgd:
                self.optimizer.lr.fill_(value)
            else:
                for group in self.optimizer.param_groups:
                    group['lr'] = value
                self.graph = None

    def __call__(self, X, y):
        """Train on ``(X, y)`` (on the device); return the loss (0-d tensor), or None
        for a batch the recorded graph cannot replay (a smaller last batch: skipped)."""
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
        if self.allreduce:  # AllReduceParallel's, recorded with the step
            self.allreduce()
        self.scaler.step(self.optimizer)
        self.scaler.update()
        return loss

    def _capture(self, X, y):
        # PyTorch's CUDA-graph notes: eager steps on the recording stream first, for
        # cuDNN's choices and the optimizer's and DDP's state
        stream = capture_stream(self.device)
        with torch.cuda.stream(stream):
            for _ in range(0 if self.captures else self.capture_after):
                self._step(X, y, cache_enabled=False)
        self.captures, graph = self.captures + 1, torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=stream):
            loss = self._step(X, y, cache_enabled=False)
        torch.cuda.current_stream(self.device).wait_stream(stream)
        return graph, loss


def data_parallel(recipe, backend, local_rank, kind='ddp'):
    """``wrap(net, **options)``: ``net``'s DistributedDataParallel (``kind`` 'ddp';
    ``options``: DDP's) or AllReduceParallel ('allreduce') on cuda:``local_rank`` (NCCL)
    or the CPU. Call it before the process group: a recorded DDP step needs NCCL's async
    error handling off, DDP built on the recording stream with a static graph, and
    DDP_EAGER_STEPS eager steps first (PyTorch's CUDA-graph notes)."""
    nccl = backend == 'nccl'
    device = torch.device('cuda', local_rank) if nccl else torch.device('cpu')
    recorded = kind == 'ddp' and nccl and recipe.plan(device).cuda_graph
    if recorded:
        os.environ['TORCH_NCCL_ASYNC_ERROR_HANDLING'] = '0'

    def wrap(net, **options):
        if kind == 'allreduce':
            return AllReduceParallel(net)
        ids = [device.index] if device.type == 'cuda' else None
        stream = capture_stream(device) if recorded else None
        with torch.cuda.stream(stream):  # None: the current stream
            model = DistributedDataParallel(net, device_ids=ids, static_graph=recorded,
                                            **options)
        if recorded:
            torch.cuda.current_stream(device).wait_stream(stream)
        return model

    return wrap


class AllReduceParallel(nn.Module):
    """Book 8.4's data parallelism grown up: ``module``'s state broadcast from rank
    0 once; after each backward pass one all-reduce of a flat buffer averages the
    gradients, recorded in the step's CUDA graph (unseen by NCCL's watchdog). No
    TorchDynamo, 3 eager steps before the capture (DDP: 11), no overlap with the
    backward pass. Batch norm's statistics stay each process's own until
    :meth:`average_buffers`."""

    def __init__(self, module):
        super().__init__()
        self.module = module
        for tensor in module.state_dict().values():
            torch.distributed.broadcast(tensor, 0)
        self.params = [p for p in module.parameters() if p.requires_grad]

    def forward(self, *args):
        return self.module(*args)

    def allreduce_grads(self):
        """Average each gradient over all processes, in place."""
        grads = [p.grad for p in self.params]
        flat = torch.cat([g.reshape(-1) for g in grads])
        torch.distributed.all_reduce(flat)
        flat /= torch.distributed.get_world_size()
        for g, part in zip(grads, flat.split([g.numel() for g in grads])):
            g.copy_(part.view_as(g))

    def average_buffers(self):
        """Average the float buffers (batch norm's running statistics) over all."""
        for b in self.module.buffers():
            if b.is_floating_point():
                torch.distributed.all_reduce(b)
                b /= torch.distributed.get_world_size()
