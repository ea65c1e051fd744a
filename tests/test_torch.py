"""d2lzh.torch (the PyTorch edition): same API as d2lzh.mxnet, PyTorch semantics.

Skipped when PyTorch is not installed (it is an optional extra: `make test
EDITION=pytorch` installs it).
"""
import numpy as np
import pytest

torch = pytest.importorskip('torch')
from d2lzh import torch as d2l  # noqa: E402
from d2lzh.torch import book  # noqa: E402  (where the device functions live: patch there)

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
    with pytest.warns(RuntimeWarning, match=r'asked for 2 GPUs but only 1 work here '
                                            r'\(cuda:0 \(NVIDIA H100 80GB HBM3\)\)'):
        assert d2l.try_devices(2) == [torch.device('cuda:0')]
    assert d2l.try_devices(1) == [torch.device('cuda:0')]


@pytest.mark.parametrize('bad', [0, -2, 1.5, True, '2'])
def test_try_devices_rejects(bad):
    with pytest.raises(ValueError, match='positive whole number'):
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
    with pytest.raises(ValueError, match='batch of 7 examples evenly over 2 devices.*'
                                         'multiple of 2.*even_split=False'):
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
    with pytest.raises(ValueError, match='no examples'):
        d2l.evaluate_accuracy([], net)


def test_resnet18_shapes():
    net = d2l.resnet18(10)
    assert net(torch.zeros(2, 1, 28, 28)).shape == (2, 10)
    net3 = d2l.resnet18(5, in_channels=3)
    assert net3(torch.zeros(1, 3, 32, 32)).shape == (1, 5)
    convs = [m for m in net.modules() if isinstance(m, torch.nn.Conv2d)]
    assert len(convs) == 1 + 16 + 3


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
    with pytest.raises(ValueError, match='positive whole number'):
        d2l.load_data_fashion_mnist(**kwargs)


def test_train_one_epoch(isolated, tiny_dataset):
    torch.manual_seed(0)
    train_iter, test_iter = d2l.load_data_fashion_mnist(4, root=tiny_dataset[0])
    net = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(784, 10))
    h = d2l.train(net, train_iter, test_iter, 2, 0.1, CPU, momentum=0.9,
                  lr_schedule='cosine', verbose=False)
    assert h['examples'] == 12 and len(h['epoch_times']) == 2
    assert 0.0 <= h['test_acc'][-1] <= 1.0 and np.isfinite(h['train_loss']).all()
    with pytest.raises(ValueError, match="lr_schedule='step'"):
        d2l.train(net, train_iter, test_iter, 1, 0.1, CPU, lr_schedule='step')


def test_train_checkpoint_resumes(isolated, tiny_dataset, tmp_path):
    torch.manual_seed(0)
    train_iter, test_iter = d2l.load_data_fashion_mnist(4, root=tiny_dataset[0])
    net = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(784, 10))
    ck = tmp_path / 'ck.pt'
    h1 = d2l.train(net, train_iter, test_iter, 1, 0.1, CPU, verbose=False, checkpoint=ck)
    assert h1['start_epoch'] == 0 and ck.exists()
    fresh = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(784, 10))
    h2 = d2l.train(fresh, train_iter, None, 2, 0.1, CPU, verbose=False, checkpoint=ck)
    assert h2['start_epoch'] == 1 and len(h2['epoch_times']) == 2
    assert len(h2['test_acc']) == 1  # epoch 1 was not evaluated: test_iter=None
    assert h2['train_loss'][0] == h1['train_loss'][0]


@pytest.mark.parametrize('capability, mode', [((7, 5), 'fp16'), ((8, 0), 'bf16'),
                                              ((9, 0), 'bf16')])
def test_amp_picks_fp16_without_bf16(monkeypatch, capability, mode):
    """A T4 (7.5) has no fast bf16: amp=True means fp16 autocast with a GradScaler."""
    from d2lzh.torch import training
    monkeypatch.setattr(torch.cuda, 'get_device_capability', lambda device=None: capability)
    assert training._amp_mode('cuda:0', True) == mode
    assert training._amp_mode('cuda:0', 'bf16') == 'bf16'
    assert training._amp_mode('cpu', True) is None and training._amp_mode('cuda:0', False) is None
    text = training._amp_description(torch.device('cuda:0'), mode)
    assert text.startswith('bf16 autocast' if mode == 'bf16' else
                           'fp16 autocast + GradScaler (cuda:0 has compute capability 7.5')
    with pytest.raises(ValueError, match="amp='fp8'"):
        training._amp_mode('cuda:0', 'fp8')


def test_train_reports_amp_off_on_the_cpu(isolated, tiny_dataset):
    train_iter, test_iter = d2l.load_data_fashion_mnist(4, root=tiny_dataset[0])
    net = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(784, 10))
    assert d2l.train(net, train_iter, test_iter, 1, 0.1, CPU, amp=True,
                     verbose=False)['amp'] == 'off'


# ------------------------------------------------- time-to-accuracy options (issue 11)

def _linear_net():
    return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(784, 10))


def test_train_stops_when_target_reached(isolated, tiny_dataset):
    """Evaluated on its own 12 training images, a linear model learns them: the
    run stops at the first epoch whose accuracy reaches the target."""
    torch.manual_seed(0)
    arrays = tiny_dataset[1]
    train_iter = d2l.FashionMNISTIter(arrays['train_images'], arrays['train_labels'], 4, True)
    test_iter = d2l.FashionMNISTIter(arrays['train_images'], arrays['train_labels'], 4, False)
    h = d2l.train(_linear_net(), train_iter, test_iter, 30, 0.05, CPU, momentum=0.9,
                  nesterov=True, label_smoothing=0.1, lr_schedule='linear', warmup=0.1,
                  target_accuracy=0.99, verbose=False)
    reached = h['reached']
    assert reached is not None and reached['test_acc'] >= 0.99
    assert reached['epoch'] == len(h['epoch_times']) < 30  # stopped early
    assert all(a < 0.99 for a in h['test_acc'][:-1]) and reached['seconds'] > 0
    assert h['warmup_time'] > 0 and h['amp'] == 'off'


def test_train_target_never_reached_is_a_result(isolated, tiny_dataset):
    torch.manual_seed(0)
    train_iter, test_iter = d2l.load_data_fashion_mnist(4, root=tiny_dataset[0])
    h = d2l.train(_linear_net(), train_iter, test_iter, 3, 0.1, CPU, target_accuracy=1.0,
                  eval_from=2, verbose=False)
    assert h['reached'] is None and len(h['epoch_times']) == 3
    assert h['test_acc'][0] is None and all(a < 1.0 for a in h['test_acc'][1:])
    assert len(h['eval_times']) == 2 and h['examples'] == 12


def test_linear_schedule_per_step():
    from d2lzh.torch import training
    lrs = training._step_lrs('linear', 1.0, 2, 5, 0.2)  # 10 steps, 2 of warm-up
    assert len(lrs) == 10 and lrs[:2] == [0.5, 1.0] and max(lrs) == 1.0
    assert all(a > b for a, b in zip(lrs[2:], lrs[3:])) and 0 < lrs[-1] <= 0.125
    assert training._step_lrs('cosine', 1.0, 2, 3, 0.0) == [1.0] * 3 + [0.5] * 3


def test_fused_sgd_matches_torch_optim():
    """The direct call of torch._fused_sgd_ makes torch.optim.SGD's update."""
    from d2lzh.torch import fast
    torch.manual_seed(0)
    a = [torch.randn(4, 3, requires_grad=True), torch.randn(5, requires_grad=True)]
    b = [p.detach().clone().requires_grad_(True) for p in a]
    ours = fast._FusedSGD(a, torch.tensor(0.1), momentum=0.9, weight_decay=5e-4, nesterov=True)
    ref = torch.optim.SGD(b, lr=0.1, momentum=0.9, weight_decay=5e-4, nesterov=True)
    for step in range(3):
        grads = [torch.randn_like(p) for p in a]
        for p, q, g in zip(a, b, grads):
            p.grad, q.grad = g.clone(), g.clone()
        try:
            ours.step()
        except (RuntimeError, NotImplementedError) as err:  # no CPU kernel in this torch
            pytest.skip(f'torch._fused_sgd_ has no CPU kernel here: {err}')
        ref.step()
        for p, q in zip(a, b):
            torch.testing.assert_close(p, q)


@pytest.mark.parametrize('kwargs, match', [
    ({'label_smoothing': 1.0}, 'label_smoothing=1.0'),
    ({'warmup': 1.0, 'lr_schedule': 'linear'}, 'warmup=1.0'),
    ({'eval_from': 3}, 'eval_from=3'),
    ({'eval_from': 0}, 'eval_from=0'),
    ({'target_accuracy': 1.5}, 'target_accuracy=1.5'),
    ({'target_accuracy': 0.9, 'lr_schedule': 'step'}, "lr_schedule='step'"),
    ({'nesterov': True}, 'nesterov=True needs momentum'),
    ({'warmup': 0.1}, "used by lr_schedule='linear' only"),
])
def test_train_rejects_bad_time_to_accuracy_options(isolated, tiny_dataset, kwargs, match):
    train_iter, test_iter = d2l.load_data_fashion_mnist(4, root=tiny_dataset[0])
    with pytest.raises(ValueError, match=match):
        d2l.train(_linear_net(), train_iter, test_iter, 2, 0.1, CPU, verbose=False, **kwargs)


def test_fast_recipe_is_a_valid_option_set(isolated, tiny_dataset):
    """d2l.FAST_RECIPE runs on the CPU (graph and bf16 are CUDA-only and skipped)."""
    torch.manual_seed(0)
    train_iter, test_iter = d2l.load_data_fashion_mnist(4, root=tiny_dataset[0])
    h = d2l.train(_linear_net(), train_iter, test_iter, d2l.FAST_EPOCHS, d2l.FAST_LR, CPU,
                  verbose=False, **d2l.FAST_RECIPE)
    assert len(h['epoch_times']) == d2l.FAST_EPOCHS and h['test_acc'][-1] is not None
    assert h['test_acc'][:d2l.FAST_RECIPE['eval_from'] - 1] == \
        [None] * (d2l.FAST_RECIPE['eval_from'] - 1)


# ------------------------------------- one loop: the CUDA-graph bookkeeping on the CPU

def _fake_graphs(monkeypatch, log, fail=False):
    """Let train() "record" graphs on the CPU: _capture_step returns an object
    whose replay() runs one eager step on the static inputs (what replaying the
    recorded step does on a GPU) and writes the loss into one static tensor."""
    from d2lzh.torch import training

    def capture(model, loss_fn, optimizer, X, y, amp, warmup, warmup_steps=3):
        lr = optimizer.param_groups[0]['lr']
        log.append(('capture', warmup, round(lr, 6)))
        if fail:
            raise RuntimeError('operation not permitted when stream is capturing')
        loss = torch.zeros(())

        class Graph:
            def replay(self):
                log.append(('replay', y.tolist()))
                optimizer.zero_grad(set_to_none=True)
                out = loss_fn(model(X), y)
                out.backward()
                optimizer.step()
                loss.copy_(out.detach())
        return Graph(), loss

    monkeypatch.setattr(training, '_record_graphs', lambda device: True)
    monkeypatch.setattr(training, '_capture_step', capture)


def _ordered_iters(tiny_dataset, batch_size):
    arrays = tiny_dataset[1]
    return (d2l.FashionMNISTIter(arrays['train_images'], arrays['train_labels'], batch_size,
                                 False),
            d2l.FashionMNISTIter(arrays['test_images'], arrays['test_labels'], 5, False))


def test_graph_loop_recaptures_when_the_epoch_rate_changes(isolated, tiny_dataset,
                                                           monkeypatch):
    """Cosine: one capture per epoch (the rate is a Python number recorded into
    the graph), eager warm-up only before the first; every full batch is
    copied into the static inputs and replayed; the short last batch is
    skipped and not counted."""
    log = []
    _fake_graphs(monkeypatch, log)
    train_iter, test_iter = _ordered_iters(tiny_dataset, 5)  # batches of 5, 5, 2
    torch.manual_seed(0)
    h = d2l.train(_linear_net(), train_iter, test_iter, 3, 0.1, CPU, cuda_graph=True,
                  lr_schedule='cosine', verbose=False)
    captures = [e for e in log if e[0] == 'capture']
    assert captures == [('capture', True, 0.1), ('capture', False, 0.075),
                        ('capture', False, 0.025)]
    labels = tiny_dataset[1]['train_labels'].tolist()
    replays = [e[1] for e in log if e[0] == 'replay']
    assert replays == [labels[:5], labels[5:10]] * 3
    assert h['examples'] == 10 and len(h['test_acc']) == 3
    assert np.isfinite(h['train_loss']).all() and h['warmup_time'] == 0.0


def test_graph_loop_times_the_start_up_apart(isolated, tiny_dataset, monkeypatch):
    """With a time-to-accuracy option the first capture (with its warm-up)
    happens before the first epoch and is timed as warmup_time; a constant
    rate needs no second capture."""
    log = []
    _fake_graphs(monkeypatch, log)
    train_iter, test_iter = _ordered_iters(tiny_dataset, 4)
    torch.manual_seed(0)
    h = d2l.train(_linear_net(), train_iter, test_iter, 2, 0.1, CPU, cuda_graph=True,
                  eval_from=2, verbose=False)
    assert [e for e in log if e[0] == 'capture'] == [('capture', True, 0.1)]
    assert sum(e[0] == 'replay' for e in log) == 1 + 2 * 3  # start-up, then 3 per epoch
    assert h['warmup_time'] > 0 and h['test_acc'][0] is None and h['examples'] == 12


def test_failed_capture_goes_on_eagerly(isolated, tiny_dataset, monkeypatch):
    log = []
    _fake_graphs(monkeypatch, log, fail=True)
    train_iter, test_iter = _ordered_iters(tiny_dataset, 5)
    with pytest.warns(RuntimeWarning, match='capturing the training step failed'):
        h = d2l.train(_linear_net(), train_iter, test_iter, 2, 0.1, CPU, cuda_graph=True,
                      verbose=False)
    assert [e[0] for e in log] == ['capture']  # tried once, never replayed
    assert h['examples'] == 12  # every batch trained eagerly, the short one too


def test_per_step_rate_without_fused_sgd_is_not_recorded(isolated, tiny_dataset,
                                                          monkeypatch):
    log = []
    _fake_graphs(monkeypatch, log)
    train_iter, test_iter = _ordered_iters(tiny_dataset, 4)
    with pytest.warns(RuntimeWarning, match=r"changes every step \(lr_schedule='linear'\)"):
        h = d2l.train(_linear_net(), train_iter, test_iter, 1, 0.1, CPU, cuda_graph=True,
                      lr_schedule='linear', verbose=False)
    assert log == [] and h['examples'] == 12


def test_time_to_accuracy_options_resume_from_a_checkpoint(isolated, tiny_dataset,
                                                           tmp_path, capsys):
    """Early stop and checkpoints together: a run that reached its target
    resumes to nothing; one that did not goes on after the saved epoch."""
    arrays = tiny_dataset[1]
    train_iter = d2l.FashionMNISTIter(arrays['train_images'], arrays['train_labels'], 4, True)
    test_iter = d2l.FashionMNISTIter(arrays['train_images'], arrays['train_labels'], 4, False)
    opts = dict(momentum=0.9, nesterov=True, label_smoothing=0.1, lr_schedule='linear',
                warmup=0.1, target_accuracy=0.99)
    ck = tmp_path / 'ck.pt'
    torch.manual_seed(0)
    h1 = d2l.train(_linear_net(), train_iter, test_iter, 30, 0.05, CPU, verbose=False,
                   checkpoint=ck, **opts)
    assert h1['reached'] is not None and len(h1['epoch_times']) < 30
    h2 = d2l.train(_linear_net(), train_iter, test_iter, 30, 0.05, CPU, checkpoint=ck, **opts)
    assert 'and the target accuracy reached' in capsys.readouterr().out
    assert h2['reached'] == h1['reached'] and h2['epoch_times'] == h1['epoch_times']
    ck2 = tmp_path / 'ck2.pt'
    opts['target_accuracy'] = 1.0  # not reached in 2 epochs
    torch.manual_seed(0)
    d2l.train(_linear_net(), train_iter, test_iter, 2, 0.05, CPU, verbose=False,
              checkpoint=ck2, **opts)
    h3 = d2l.train(_linear_net(), train_iter, test_iter, 3, 0.05, CPU, verbose=False,
                   checkpoint=ck2, **opts)
    assert h3['start_epoch'] == 2 and len(h3['epoch_times']) == 3


def test_checkpoint_of_another_optimizer_is_refused(isolated, tiny_dataset, tmp_path):
    from d2lzh.torch import fast, training
    train_iter, test_iter = d2l.load_data_fashion_mnist(4, root=tiny_dataset[0])
    ck = tmp_path / 'ck.pt'
    d2l.train(_linear_net(), train_iter, None, 1, 0.1, CPU, momentum=0.9, verbose=False,
              checkpoint=ck)
    net = _linear_net()
    fused = fast._FusedSGD(net.parameters(), torch.tensor(0.1), momentum=0.9)
    before = ck.read_bytes()
    with pytest.raises(ValueError, match='holds the state of another optimizer'):
        training._load_checkpoint(ck, CPU, net, fused, None, {})
    assert ck.read_bytes() == before  # the file is only read


def test_fused_sgd_state_round_trip():
    from d2lzh.torch import fast
    a = [torch.randn(4, 3, requires_grad=True), torch.randn(5, requires_grad=True)]
    opt = fast._FusedSGD(a, torch.tensor(0.1), momentum=0.9)
    assert opt.state_dict() == {'fused_sgd_momentum_buffers': None}  # before the first step
    opt.buffers = [torch.full_like(p, 2.0) for p in a]
    other = fast._FusedSGD(a, torch.tensor(0.1), momentum=0.9)
    other.load_state_dict(opt.state_dict())
    assert all(torch.equal(x, y) for x, y in zip(other.buffers, opt.buffers))
    with pytest.raises(ValueError, match='do not fit'):
        other.load_state_dict({'fused_sgd_momentum_buffers': [torch.zeros(2)]})
