"""d2lzh.torch (the PyTorch edition): same API as d2lzh.mxnet, PyTorch semantics.

Skipped when PyTorch is not installed (it is an optional extra: `make test
EDITION=pytorch` installs it).
"""
import numpy as np
import pytest

torch = pytest.importorskip('torch')
from d2lzh import torch as d2l  # noqa: E402
from d2lzh.torch import book  # noqa: E402  (where the device functions live: patch there)
from d2lzh.torch import data as tdata  # noqa: E402

CPU = torch.device('cpu')


def test_no_gpu_gives_cpu(monkeypatch):
    monkeypatch.setattr(book, 'num_gpus', lambda: 0)
    assert d2l.try_gpu() == CPU
    assert d2l.try_all_gpus() == [CPU]
    assert d2l.try_devices(2) == [CPU, CPU]


def test_too_few_gpus_warns_and_gives_those_there_are(monkeypatch):
    """As in the MXNet edition: a RuntimeWarning naming the GPUs, not an error."""
    monkeypatch.setattr(book, 'num_gpus', lambda: 1)
    monkeypatch.setattr(book, 'gpu_name', lambda i: 'NVIDIA H100 80GB HBM3')
    with pytest.warns(RuntimeWarning, match=r'要 2 块 GPU，这里只有 1 块能用'
                                            r'（cuda:0 \(NVIDIA H100 80GB HBM3\)）'):
        assert d2l.try_devices(2) == [torch.device('cuda:0')]
    assert d2l.try_devices(1) == [torch.device('cuda:0')]


@pytest.mark.parametrize('bad', [0, -2, 1.5, True, '2'])
def test_try_devices_rejects(bad):
    with pytest.raises(ValueError, match='无效：请用正整数'):
        d2l.try_devices(bad)


def test_allreduce_updates_every_tensor_in_place():
    data = [torch.full((2, 3), float(i + 1)) for i in range(3)]
    ptrs = [t.data_ptr() for t in data]
    objects = list(data)
    d2l.allreduce(data)
    for t, obj, ptr in zip(data, objects, ptrs):
        assert t is obj and t.data_ptr() == ptr
        assert torch.equal(t, torch.full((2, 3), 6.0))


def test_allreduce_reaches_gradients():
    params = [torch.ones(3, requires_grad=True) for _ in range(2)]
    for i, p in enumerate(params):
        (p * (i + 1)).sum().backward()
    d2l.allreduce([p.grad for p in params])
    assert all(torch.equal(p.grad, torch.full((3,), 3.0)) for p in params)


def test_split_and_load():
    X = torch.arange(12).reshape(6, 2)
    parts = d2l.split_and_load(X, [CPU] * 3)
    assert [p.shape for p in parts] == [(2, 2)] * 3
    assert torch.equal(torch.cat(parts), X)
    with pytest.raises(ValueError, match='不能把 7 个样本的批量均分到 2 个设备上.*'
                                         '2 的倍数.*even_split=False'):
        d2l.split_and_load(torch.zeros(7, 2), [CPU] * 2)
    assert [p.shape[0] for p in d2l.split_and_load(np.zeros(7), [CPU] * 3,
                                                   even_split=False)] == [2, 2, 3]


def test_get_params_and_sgd():
    params = [torch.ones(2)]
    copies = d2l.get_params(params, CPU)
    assert copies[0].requires_grad and copies[0].is_leaf
    (copies[0] * torch.tensor([1.0, 3.0])).sum().backward()
    d2l.sgd(copies, lr=0.5, batch_size=1)
    assert torch.allclose(copies[0], torch.tensor([0.5, -0.5]))
    assert torch.equal(copies[0].grad, torch.zeros(2))
    assert torch.equal(params[0], torch.ones(2))


def test_evaluate_accuracy_and_mode_restored():
    net = torch.nn.Sequential(torch.nn.Linear(2, 2, bias=False), torch.nn.Dropout(0.5))
    with torch.no_grad():
        net[0].weight.copy_(torch.eye(2))
    X = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 0.0], [0.0, 1.0]])
    y = torch.tensor([0, 1, 1, 1])
    net.train()
    batches = [(X[:3], y[:3]), (X[3:], y[3:])]
    assert d2l.evaluate_accuracy(batches, net) == 0.75  # dropout off during evaluation
    assert net.training
    with pytest.raises(ValueError, match='没有给出任何样本'):
        d2l.evaluate_accuracy([], net)


def test_resnet18_shapes():
    net = d2l.resnet18(10)
    assert net(torch.zeros(2, 1, 28, 28)).shape == (2, 10)
    net3 = d2l.resnet18(5, in_channels=3)
    assert net3(torch.zeros(1, 3, 32, 32)).shape == (1, 5)
    convs = [m for m in net.modules() if isinstance(m, torch.nn.Conv2d)]
    assert len(convs) == 1 + 16 + 3


def test_resnet18_without_conv_bias_computes_the_same_in_training():
    """The batch norm after a convolution subtracts each channel's batch mean, so that
    convolution's bias changes nothing: with the other weights copied, the network without
    those 17 biases gives the same outputs and the same gradients in training."""
    torch.manual_seed(0)
    with_bias, without = d2l.resnet18(10).double(), d2l.resnet18(10, conv_bias=False).double()
    for m in with_bias.modules():  # biases far from 0, so a mistake would show
        if isinstance(m, torch.nn.Conv2d):
            torch.nn.init.uniform_(m.bias, -3, 3)
    dropped = {n for n, _ in with_bias.named_parameters()} - \
        {n for n, _ in without.named_parameters()}
    assert len(dropped) == 17 and all(n.endswith('.bias') for n in dropped)
    assert not any('conv3' in n for n in dropped)  # the 1x1 shortcuts keep theirs
    assert sum(with_bias.state_dict()[n].numel() for n in dropped) == 3904
    without.load_state_dict({k: v for k, v in with_bias.state_dict().items() if k not in dropped})
    X, y = torch.rand(8, 1, 28, 28, dtype=torch.float64), torch.arange(8) % 10
    for net in (with_bias, without):
        torch.nn.functional.cross_entropy(net(X), y).backward()
    torch.testing.assert_close(with_bias(X), without(X))
    grads = dict(without.named_parameters())
    for name, p in with_bias.named_parameters():
        if name in dropped:  # the loss does not depend on it
            assert p.grad.abs().max() < 1e-8
        else:
            torch.testing.assert_close(p.grad, grads[name].grad)


def test_load_data_fashion_mnist(isolated, tiny_dataset):
    folder, arrays = tiny_dataset
    train_iter, test_iter = d2l.load_data_fashion_mnist(5, root=folder)
    assert len(train_iter) == 3
    X, y = next(iter(test_iter))
    assert X.shape == (5, 1, 28, 28) and X.dtype == torch.float32 and y.dtype == torch.int64
    assert torch.allclose(X[:, 0], torch.tensor(arrays['test_images'] / 255, dtype=torch.float32))
    labels = torch.cat([b[1] for b in train_iter]).sort().values
    assert labels.tolist() == sorted(arrays['train_labels'].tolist())
    X, _ = next(iter(d2l.load_data_fashion_mnist(4, resize=32, root=folder)[1]))
    assert X.shape == (4, 1, 32, 32)


def test_shuffled_pass_through_reused_buffer(isolated, tiny_dataset, monkeypatch):
    """The pinned path's logic (the CPU build cannot pin): each shuffled pass is
    gathered into one reused buffer, images stay with their labels, and the
    buffer is refilled only after waiting for the event of the previous pass."""
    events = []

    class FakeEvent:
        def __init__(self):
            self.waited = False
            events.append(self)

        def record(self):
            pass

        def synchronize(self):
            self.waited = True

    monkeypatch.setattr(torch.cuda, 'Event', FakeEvent)
    folder, arrays = tiny_dataset
    train_iter, _ = d2l.load_data_fashion_mnist(5, root=folder)
    train_iter._epoch_buffers = (torch.empty_like(train_iter.images),
                                 torch.empty_like(train_iter.labels))
    images = torch.tensor(arrays['train_images'] / 255, dtype=torch.float32)
    orders = []
    for epoch in range(2):
        batches = list(train_iter)
        assert [len(y) for _, y in batches] == [5, 5, 2]
        for X, y in batches:
            assert X.data_ptr() >= train_iter._epoch_buffers[0].data_ptr()  # views of it
        X = torch.cat([b[0] for b in batches])[:, 0]
        y = torch.cat([b[1] for b in batches])
        order = [int(torch.nonzero((images == x).all(dim=2).all(dim=1))[0]) for x in X]
        assert sorted(order) == list(range(12))
        assert y.tolist() == [int(arrays['train_labels'][i]) for i in order]
        orders.append(order)
    assert len(events) == 2 and events[0].waited and not events[1].waited
    assert orders[0] != orders[1]


@pytest.mark.parametrize('kwargs', [{'batch_size': 0}, {'batch_size': 2.0},
                                    {'batch_size': 8, 'resize': -1}])
def test_load_data_rejects(kwargs):
    with pytest.raises(ValueError, match='无效：请用正整数'):
        d2l.load_data_fashion_mnist(**kwargs)



def test_lenet_is_the_book_8_4_network():
    net = d2l.lenet()
    assert net(torch.zeros(2, 1, 28, 28)).shape == (2, 10)
    kinds = [type(m).__name__ for m in net]
    assert kinds == ['Conv2d', 'ReLU', 'AvgPool2d', 'Conv2d', 'ReLU', 'AvgPool2d', 'Flatten',
                     'Linear', 'ReLU', 'Linear']
    assert [(m.out_channels, m.kernel_size) for m in net if isinstance(m, torch.nn.Conv2d)] \
        == [(20, (3, 3)), (50, (5, 5))]
    assert net[7].out_features == 128


def test_shard_iter_takes_its_slice_of_the_global_minibatch():
    """Worker r's step t is its slice of step t's global minibatch (d2lzh.jobs.batch_indices):
    the two workers' batches side by side are the one-process batches of twice the size."""
    from d2lzh import jobs
    images = np.arange(10 * 28 * 28, dtype=np.uint8).reshape(10, 28, 28) % 251
    labels = np.arange(10)
    shards = [tdata.ShardIter(images, labels, 2, rank, 2, seed=3) for rank in range(2)]
    for epoch in (0, 1):
        for s in shards:
            s.set_epoch(epoch)
        steps = [list(s) for s in shards]
        assert [len(s) for s in shards] == [2, 2] and [len(b) for b in steps] == [2, 2]
        whole = jobs.batch_indices(10, 2, 2, None, epoch, 3)
        for t, index in enumerate(whole):
            y = torch.cat([steps[0][t][1], steps[1][t][1]])
            assert y.tolist() == labels[index].tolist()
            X = torch.cat([steps[0][t][0], steps[1][t][0]])
            assert X.dtype == torch.float32 and X.shape == (4, 1, 28, 28)
            assert torch.equal(X[:, 0], torch.tensor(images[index] / 255, dtype=torch.float32))
    with pytest.raises(ValueError, match='凑不满一个全局小批量'):
        tdata.ShardIter(images, labels, 8, 0, 2)


# ------------------------------------------------------------- the book's loop (8.5)

def _linear_net():
    return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(784, 10))


def test_train_is_the_book_loop(isolated, tiny_dataset, capsys):
    torch.manual_seed(0)
    train_iter, test_iter = d2l.load_data_fashion_mnist(4, root=tiny_dataset[0])
    h = d2l.train(_linear_net(), train_iter, test_iter, 2, 0.1, CPU)
    assert h['examples'] == 12 and len(h['epoch_times']) == len(h['test_acc']) == 2
    assert 0.0 <= h['test_acc'][-1] <= 1.0 and np.isfinite(h['train_loss']).all()
    assert h['images_per_s'] == 12 / min(h['epoch_times'])
    assert capsys.readouterr().out.count('迭代周期 ') == 2  # one line per epoch
    h = d2l.train_data_parallel(_linear_net(), train_iter, test_iter, 1, 0.1, [CPU, CPU],
                                verbose=False)
    assert h['examples'] == 12


def test_train_is_one_screen():
    import inspect
    assert len(inspect.getsource(d2l.train).splitlines()) <= 60


# ---------------------------------------------------------------- the fast path: Recipe

@pytest.mark.parametrize('kwargs, match', [
    ({'label_smoothing': 1.0}, r'label_smoothing=1.0 无效：请用区间 \[0, 1\) 中的数'),
    ({'lr_warmup': 1.0, 'lr_schedule': 'linear'}, 'lr_warmup=1.0'),
    ({'eval_from': 5}, 'eval_from=5 无效：请用从 1 到 epochs=4 的迭代周期'),
    ({'eval_from': 0}, 'eval_from=0'),
    ({'target_accuracy': 1.5}, 'target_accuracy=1.5'),
    ({'lr_schedule': 'step'}, "lr_schedule='step' 无效"),
    ({'nesterov': True}, 'nesterov=True 要求 momentum > 0：.*momentum=0.9'),
    ({'lr_warmup': 0.1}, "lr_warmup=0.1 只对线性学习率调度起作用：请同时传入 lr_schedule='linear'"),
    ({'amp': True}, r"amp=True 无效：请用以下之一：\('auto', 'bf16', 'fp16', 'off'\)"),
    ({'epochs': 2.0}, 'epochs=2.0 无效：请用不小于 1 的整数'),
    ({'batch_size': 0}, 'batch_size=0'),
    ({'momentum': 1.0}, 'momentum=1.0'),
    ({'capture_after': 0}, 'capture_after=0'),
    ({'cuda_graph': True, 'lr_schedule': 'linear'}, '要 fused_sgd=True'),
    ({'checkpoint': 5}, 'checkpoint=5 无效：请用文件名或 None'),
])
def test_recipe_rejects_with_the_fix(kwargs, match):
    with pytest.raises(ValueError, match=match):
        d2l.Recipe(**kwargs)


def test_recipe_is_one_immutable_object():
    import dataclasses
    assert d2l.FAST == d2l.Recipe(
        batch_size=512, epochs=2, lr=0.1, amp='auto', channels_last=True, cuda_graph=True,
        momentum=0.9, nesterov=True, weight_decay=5e-4, lr_schedule='linear', lr_warmup=0.2,
        label_smoothing=0.1, target_accuracy=0.92, eval_from=2, fused_sgd=True,
        time_startup=True)
    with pytest.raises(dataclasses.FrozenInstanceError):
        d2l.FAST.epochs = 3
    assert dataclasses.replace(d2l.FAST, epochs=3).eval_from == 2
    defaults = d2l.Recipe()  # nothing beyond the book's SGD is on by default but amp/NHWC
    assert not (defaults.cuda_graph or defaults.fused_sgd or defaults.time_startup
                or defaults.compile or defaults.momentum or defaults.label_smoothing)


def _pretend_amp_works(monkeypatch):
    """On a CPU build a GradScaler disables itself; let it believe CUDA is there."""
    monkeypatch.setattr(torch.cuda.amp.common, 'amp_definitely_not_available', lambda: False)


@pytest.mark.parametrize('capability, mode', [((7, 5), 'fp16'), ((8, 0), 'bf16'),
                                              ((9, 0), 'bf16')])
def test_amp_picks_fp16_without_bf16(monkeypatch, capability, mode):
    """A T4 (7.5) has no fast bf16: amp='auto' means fp16 autocast with a GradScaler."""
    import dataclasses
    _pretend_amp_works(monkeypatch)
    monkeypatch.setattr(torch.cuda, 'get_device_capability', lambda device=None: capability)
    plain = d2l.Recipe()
    step = d2l.TrainStep(_linear_net(), plain, 'cuda:0')
    assert step.amp == mode and step.scaler.is_enabled() == (mode == 'fp16')
    assert d2l.TrainStep(_linear_net(), dataclasses.replace(plain, amp='bf16'), 'cuda:0').amp \
        == 'bf16'
    assert d2l.TrainStep(_linear_net(), plain, CPU).amp is None
    assert d2l.TrainStep(_linear_net(), dataclasses.replace(plain, amp='off'), 'cuda:0').amp \
        is None


def test_fp16_says_that_its_step_is_neither_fused_nor_recorded(monkeypatch):
    _pretend_amp_works(monkeypatch)
    monkeypatch.setattr(torch.cuda, 'get_device_capability', lambda device=None: (7, 5))
    with pytest.warns(RuntimeWarning, match='既不用融合 SGD，也不录成 CUDA 图'):
        step = d2l.TrainStep(_linear_net(), d2l.FAST, 'cuda:0')
    assert step.amp == 'fp16' and not step.fused_sgd and not step.cuda_graph
    assert step.scaler.is_enabled()


def test_linear_schedule_per_step():
    from d2lzh.torch.step import learning_rates
    linear = d2l.Recipe(epochs=2, lr=1.0, lr_schedule='linear', lr_warmup=0.2)
    lrs = learning_rates(linear, 5)  # 10 steps, 2 of warm-up
    assert len(lrs) == 10 and lrs[:2] == [0.5, 1.0] and max(lrs) == 1.0
    assert all(a > b for a, b in zip(lrs[2:], lrs[3:])) and 0 < lrs[-1] <= 0.125
    cosine = d2l.Recipe(epochs=2, lr=1.0, lr_schedule='cosine')
    assert learning_rates(cosine, 3) == [1.0] * 3 + [0.5] * 3
    assert learning_rates(d2l.Recipe(epochs=1), 2) == [0.1, 0.1]


def test_fused_sgd_matches_torch_optim():
    """The direct call of torch._fused_sgd_ makes torch.optim.SGD's update."""
    from d2lzh.torch.step import FusedSGD
    torch.manual_seed(0)
    a = [torch.randn(4, 3, requires_grad=True), torch.randn(5, requires_grad=True)]
    b = [p.detach().clone().requires_grad_(True) for p in a]
    ours = FusedSGD(a, torch.tensor(0.1), momentum=0.9, weight_decay=5e-4, nesterov=True)
    ref = torch.optim.SGD(b, lr=0.1, momentum=0.9, weight_decay=5e-4, nesterov=True)
    for step in range(3):
        grads = [torch.randn_like(p) for p in a]
        for p, q, g in zip(a, b, grads):
            p.grad, q.grad = g.clone(), g.clone()
        ours.step()
        ref.step()
        for p, q in zip(a, b):
            torch.testing.assert_close(p, q)


def test_fused_sgd_state_round_trip():
    from d2lzh.torch.step import FusedSGD
    a = [torch.randn(4, 3, requires_grad=True), torch.randn(5, requires_grad=True)]
    opt = FusedSGD(a, torch.tensor(0.1), momentum=0.9)
    assert opt.state_dict() == {'fused_sgd_momentum_buffers': None}  # before the first step
    opt.buffers = [torch.full_like(p, 2.0) for p in a]
    other = FusedSGD(a, torch.tensor(0.1), momentum=0.9)
    other.load_state_dict(opt.state_dict())
    assert all(torch.equal(x, y) for x, y in zip(other.buffers, opt.buffers))
    with pytest.raises(ValueError, match='形状与参数不符'):
        other.load_state_dict({'fused_sgd_momentum_buffers': [torch.zeros(2)]})


# ------------------------------------------------------------ the fast path: train_fast

def _own_images(tiny_dataset, batch_size=4):
    """Training iterator and, as test set, the same 12 images: a linear model learns them."""
    arrays = tiny_dataset[1]
    return (tdata.FashionMNISTIter(arrays['train_images'], arrays['train_labels'], batch_size,
                                 True),
            tdata.FashionMNISTIter(arrays['train_images'], arrays['train_labels'], 4, False))


TTA = d2l.Recipe(batch_size=4, epochs=30, lr=0.05, momentum=0.9, nesterov=True,
                 label_smoothing=0.1, lr_schedule='linear', lr_warmup=0.1,
                 target_accuracy=0.99)


def test_train_fast_stops_when_target_reached(isolated, tiny_dataset):
    torch.manual_seed(0)
    h = d2l.train_fast(_linear_net(), *_own_images(tiny_dataset), CPU, TTA, verbose=False)
    reached = h['reached']
    assert reached is not None and reached['test_acc'] >= 0.99
    assert reached['epoch'] == len(h['epoch_times']) < 30  # stopped early
    assert all(a < 0.99 for a in h['test_acc'][:-1]) and reached['seconds'] > 0
    assert h['startup_s'] == 0.0 and h['amp'] == 'off' and not h['fused_sgd']


def test_train_fast_target_never_reached_is_a_result(isolated, tiny_dataset):
    torch.manual_seed(0)
    train_iter, test_iter = d2l.load_data_fashion_mnist(4, root=tiny_dataset[0])
    recipe = d2l.Recipe(batch_size=4, epochs=3, target_accuracy=1.0, eval_from=2)
    h = d2l.train_fast(_linear_net(), train_iter, test_iter, CPU, recipe, verbose=False)
    assert h['reached'] is None and len(h['epoch_times']) == 3
    assert h['test_acc'][0] is None and all(a < 1.0 for a in h['test_acc'][1:])
    assert len(h['eval_times']) == 2 and h['examples'] == 12


def test_fast_recipe_runs_on_the_cpu(isolated, tiny_dataset):
    """d2l.FAST on the CPU: no graph, no mixed precision; the fused SGD and the start-up
    step (timed as startup_s) run as the recipe says."""
    import dataclasses
    torch.manual_seed(0)
    train_iter, test_iter = d2l.load_data_fashion_mnist(4, root=tiny_dataset[0])
    with pytest.raises(ValueError, match=r'批量大小是 4，recipe.batch_size 却是 512：.*'
                                         r'dataclasses.replace\(recipe, batch_size=4\)'):
        d2l.train_fast(_linear_net(), train_iter, test_iter, CPU, d2l.FAST)
    fast = dataclasses.replace(d2l.FAST, batch_size=4)
    h = d2l.train_fast(_linear_net(), train_iter, test_iter, CPU, fast, verbose=False)
    assert len(h['epoch_times']) == 2 and h['test_acc'][0] is None and h['test_acc'][1] is not None
    assert h['fused_sgd'] and not h['cuda_graph'] and h['amp'] == 'off' and h['startup_s'] > 0


def test_checkpoints_resume_and_refuse_another_optimizer(isolated, tiny_dataset, tmp_path,
                                                          capsys):
    """A run that reached its target resumes to nothing; one that did not goes on after the
    saved epoch; a file written with other SGD settings is refused, and only read."""
    import dataclasses
    ck = tmp_path / 'ck.pt'
    recipe = dataclasses.replace(TTA, checkpoint=ck)
    torch.manual_seed(0)
    h1 = d2l.train_fast(_linear_net(), *_own_images(tiny_dataset), CPU, recipe, verbose=False)
    assert h1['reached'] is not None and len(h1['epoch_times']) < 30
    h2 = d2l.train_fast(_linear_net(), *_own_images(tiny_dataset), CPU, recipe)
    assert '且已达到目标准确率' in capsys.readouterr().out
    assert h2['reached'] == h1['reached'] and h2['epoch_times'] == h1['epoch_times']
    ck2 = tmp_path / 'ck2.pt'
    recipe = dataclasses.replace(recipe, target_accuracy=1.0, epochs=2, checkpoint=ck2)
    torch.manual_seed(0)
    d2l.train_fast(_linear_net(), *_own_images(tiny_dataset), CPU, recipe, verbose=False)
    h3 = d2l.train_fast(_linear_net(), *_own_images(tiny_dataset), CPU,
                        dataclasses.replace(recipe, epochs=3), verbose=False)
    assert h3['start_epoch'] == 2 and len(h3['epoch_times']) == 3
    before = ck2.read_bytes()
    with pytest.raises(ValueError, match='存的是另一种优化器的状态'):
        d2l.train_fast(_linear_net(), *_own_images(tiny_dataset), CPU,
                       dataclasses.replace(recipe, epochs=3, fused_sgd=True), verbose=False)
    assert ck2.read_bytes() == before  # the file is only read


# --------------------------------- the CUDA-graph bookkeeping of TrainStep, on the CPU

def _fake_graphs(monkeypatch, log, fail=False):
    """Let TrainStep "record" graphs on the CPU: _capture returns an object whose replay()
    runs the real eager step on the static inputs (what replaying the recorded step does on
    a GPU) and writes the loss into one static tensor."""
    from d2lzh.torch.step import TrainStep

    def capture(self, X, y):
        log.append(('capture', self.captures, round(self.rate, 6)))
        if fail:
            raise RuntimeError('operation not permitted when stream is capturing')
        self.captures, loss = self.captures + 1, torch.zeros(())

        class Graph:
            def replay(self_graph):
                log.append(('replay', y.tolist()))
                loss.copy_(self._step(X, y).detach())
        return Graph(), loss

    monkeypatch.setattr(TrainStep, 'graph_devices', ('cpu', 'cuda'))
    monkeypatch.setattr(TrainStep, '_capture', capture)


def _ordered(tiny_dataset, batch_size):
    arrays = tiny_dataset[1]
    return (tdata.FashionMNISTIter(arrays['train_images'], arrays['train_labels'], batch_size,
                                 False),
            tdata.FashionMNISTIter(arrays['test_images'], arrays['test_labels'], 5, False))


def test_graph_recaptured_when_a_python_rate_changes(isolated, tiny_dataset, monkeypatch):
    """Cosine with torch.optim: one capture per epoch (the rate is a number recorded into the
    graph), eager steps only before the first; every full batch is copied into the static
    inputs and replayed; the short last batch is skipped and not counted."""
    log = []
    _fake_graphs(monkeypatch, log)
    torch.manual_seed(0)
    recipe = d2l.Recipe(batch_size=5, epochs=3, cuda_graph=True, lr_schedule='cosine')
    h = d2l.train_fast(_linear_net(), *_ordered(tiny_dataset, 5), CPU, recipe, verbose=False)
    assert [e for e in log if e[0] == 'capture'] == [
        ('capture', 0, 0.1), ('capture', 1, 0.075), ('capture', 2, 0.025)]
    labels = tiny_dataset[1]['train_labels'].tolist()
    assert [e[1] for e in log if e[0] == 'replay'] == [labels[:5], labels[5:10]] * 3
    assert h['examples'] == 10 and len(h['test_acc']) == 3 and h['cuda_graph']
    assert np.isfinite(h['train_loss']).all() and h['startup_s'] == 0.0


def test_graph_follows_a_fused_rate_and_times_the_start_up(isolated, tiny_dataset,
                                                         monkeypatch):
    """The fused SGD reads its rate from a tensor: one capture for a rate that changes every
    step. time_startup captures before epoch 1 and times it as startup_s."""
    log = []
    _fake_graphs(monkeypatch, log)
    torch.manual_seed(0)
    recipe = d2l.Recipe(batch_size=4, epochs=2, cuda_graph=True, fused_sgd=True,
                        lr_schedule='linear', lr_warmup=0.5, time_startup=True, eval_from=2)
    h = d2l.train_fast(_linear_net(), *_ordered(tiny_dataset, 4), CPU, recipe, verbose=False)
    assert [e for e in log if e[0] == 'capture'] == [('capture', 0, round(0.1 / 3, 6))]
    assert sum(e[0] == 'replay' for e in log) == 1 + 2 * 3  # start-up, then 3 per epoch
    assert h['startup_s'] > 0 and h['test_acc'][0] is None and h['examples'] == 12


def test_failed_capture_goes_on_eagerly(isolated, tiny_dataset, monkeypatch):
    log = []
    _fake_graphs(monkeypatch, log, fail=True)
    recipe = d2l.Recipe(batch_size=5, epochs=2, cuda_graph=True)
    with pytest.warns(RuntimeWarning, match='录制训练步骤失败'):
        h = d2l.train_fast(_linear_net(), *_ordered(tiny_dataset, 5), CPU, recipe,
                           verbose=False)
    assert [e[0] for e in log] == ['capture']  # tried once, never replayed
    assert h['examples'] == 12 and not h['cuda_graph']  # every batch eager, the short one too


def test_cuda_graph_replica_needs_a_gpu():
    """d2l.CUDAGraphReplica (notebook 05, beyond the book) says why it cannot run on a CPU."""
    params = [torch.zeros(3, requires_grad=True)]
    with pytest.raises(RuntimeError, match='CUDA 图需要 CUDA 设备，参数却在 cpu 上'):
        d2l.CUDAGraphReplica(lambda X, y: (X @ params[0]).sum(), params, torch.ones(2, 3),
                             torch.ones(2), lr=0.1, batch_size=2)


def test_ladder_steps_change_one_thing_each():
    configs = d2l.ladder_configs()
    assert configs['a'] == {'data': 'host', 'cudnn_benchmark': False, 'amp': False,
                            'channels_last': False, 'compile': False, 'cuda_graph': False}
    for key, _, _, parent, change in d2l.LADDER[1:]:
        assert {k: v for k, v in configs[key].items() if configs[parent][k] != v} == change


def test_ladder_recipe_carries_the_steps_techniques():
    """Notebook 07 and bench translate a ladder step into a Recipe in one place; the steps
    that train with the book's loop are those whose recipe equals (a)'s."""
    configs = d2l.ladder_configs()
    book = d2l.ladder_recipe(configs['a'])
    assert (book.amp, book.channels_last, book.compile, book.cuda_graph) == ('off', False,
                                                                             False, False)
    assert [k for k in configs if d2l.ladder_recipe(configs[k]) == book] == ['a', 'b', 'c', 'd']
    g3 = d2l.ladder_recipe(configs['g3'], batch_size=64, lr=0.3)
    assert (g3.amp, g3.channels_last, g3.compile, g3.cuda_graph, g3.batch_size, g3.lr) == \
        ('auto', True, True, True, 64, 0.3) and g3.memory_format == torch.channels_last
    assert d2l.Recipe(cuda_graph=True).plan(CPU).cuda_graph is False  # a graph needs CUDA


def test_train_ladder_step_trains_the_book_step_with_the_books_loop():
    """d2l.train_ladder_step (notebook 07, bench_torch.py): the book's d2l.train for (a),
    d2l.train_fast (its History) for a step with a technique or a field."""
    from d2lzh.torch.recipe import History
    train_iter, test_iter = d2l.load_data_fashion_mnist(32, max_examples=64)
    configs = d2l.ladder_configs()
    book_step = d2l.train_ladder_step(configs['a'], train_iter, test_iter, 1, 0.1, CPU, False)
    assert type(book_step) is dict and len(book_step['epoch_times']) == 1
    fast = d2l.train_ladder_step(configs['a'], train_iter, test_iter, 1, 0.1, CPU, False,
                                 momentum=0.9)
    assert isinstance(fast, History) and fast['examples'] == fast.examples == 64


def test_cold_start_runs_the_users_lines_in_a_fresh_process(tmp_path):
    """d2l.cold_start: a process started by path (torch not imported before its first
    item), the stages in order with a setup hook's, train_fast's history, the seconds to
    the target from the start."""
    (tmp_path / 'hook.py').write_text(
        'import dataclasses\nimport torch\n\n\ndef halve(recipe, lr):\n'
        '    return dataclasses.replace(recipe, lr=lr), torch.nn.Sequential\n')
    r = d2l.cold_start({'recipe': {'batch_size': 32, 'epochs': 1, 'lr': 0.05, 'amp': 'off',
                                   'channels_last': False}, 'max_examples': 64, 'target': 0.0},
                       timeout=300, env={'OMP_NUM_THREADS': '1', 'PYTHONPATH': str(tmp_path)},
                       setup=('hook:halve', 0.025))
    assert list(r['items']) == ['python_start', 'import_torch', 'import_d2lzh', 'cuda_init',
                                'setup', 'data', 'startup', 'epochs', 'evals', 'other']
    assert min(r['items'].values()) >= 0 and r['items']['import_torch'] > 0.2
    assert abs(sum(r['items'].values()) - r['total_s']) < 1e-6
    assert r['history']['examples'] == 64 and len(r['history']['test_acc']) == 1
    before = sum(r['items'][k] for k in list(r['items'])[:6])
    assert before < r['reached_s'] <= r['total_s']  # target 0: the first evaluation
    with pytest.raises(RuntimeError, match='退出码 1'):
        d2l.cold_start({'recipe': {'epochs': 0}}, timeout=120)


def test_a_ddp_step_takes_at_least_11_eager_steps_before_its_capture():
    """PyTorch's CUDA-graph notes: a DDP step is recorded after 11 eager steps at least,
    whatever recipe.capture_after asks; another step after capture_after (default 3)."""
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    from d2lzh.torch.step import DDP_EAGER_STEPS, TrainStep
    dist.init_process_group('gloo', store=dist.HashStore(), rank=0, world_size=1)
    try:
        ddp = DistributedDataParallel(_linear_net())
        assert DDP_EAGER_STEPS == 11
        for asked, taken in [(None, 11), (1, 11), (20, 20)]:
            recipe = d2l.Recipe(capture_after=asked)
            assert TrainStep(ddp, recipe, CPU).capture_after == taken
            assert TrainStep(_linear_net(), recipe, CPU).capture_after == (asked or 3)
    finally:
        dist.destroy_process_group()
