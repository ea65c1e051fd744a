"""Time to accuracy (beyond the book): :data:`FAST_RECIPE`, the option set of
:func:`d2lzh.torch.train` measured fastest from a cold start to 0.92 test
accuracy on one H100 (``bench/bench_torch.py time_to_accuracy``; notebook
在现代 GPU 上把训练跑满), and the fused SGD update that ``train`` uses with those
options on a GPU. The loop itself is ``train``'s, the same as for every other
option set and for DistributedDataParallel.

    train_iter, test_iter = d2l.load_data_fashion_mnist(d2l.FAST_BATCH_SIZE,
                                                        device=d2l.try_gpu())
    torch.backends.cudnn.benchmark = False   # autotuning costs seconds at start
    history = d2l.train(d2l.resnet18(10), train_iter, test_iter, d2l.FAST_EPOCHS,
                        d2l.FAST_LR, d2l.try_gpu(), **d2l.FAST_RECIPE)
    history['reached']   # {'epoch', 'test_acc', 'seconds'} or None
"""
import torch

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

    def state_dict(self):
        """The momentum buffers (a list of tensors, or None before the first
        step), for :func:`d2lzh.torch.train`'s checkpoint."""
        return {'fused_sgd_momentum_buffers': self.buffers}

    def load_state_dict(self, state):
        """Restore :meth:`state_dict`'s buffers. Raises KeyError for the
        state of another optimizer, ValueError for buffers of other shapes."""
        buffers = state['fused_sgd_momentum_buffers']
        if buffers is not None:
            if [b.shape for b in buffers] != [p.shape for p in self.params]:
                raise ValueError('the momentum buffers do not fit the parameters')
            buffers = [b.to(p.device, p.dtype) for b, p in zip(buffers, self.params)]
        self.buffers = buffers

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
