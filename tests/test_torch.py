"""d2lzh.torch (the PyTorch edition): same API as d2lzh.mxnet, PyTorch semantics.

Skipped when PyTorch is not installed (it is an optional extra: `make test
EDITION=pytorch` installs it).
"""
import numpy as np
import psutil
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


def _children():
    """Child processes, except multiprocessing's resource tracker (one per
    parent process, shared by every spawn, by design)."""
    return [p for p in psutil.Process().children(recursive=True)
            if 'resource_tracker' not in ' '.join(p.cmdline())]


def test_ddp_on_cpu_with_gloo(debian_dir):
    result = d2l.run_ddp(2, num_epochs=1, batch_size=8, max_examples=32, timeout=300,
                         amp=False, channels_last=False)
    assert result['world_size'] == 2 and result['backend'] == 'gloo'
    assert result['examples'] == 32 and len(result['test_acc']) == 1
    assert not _children()


def test_ddp_worker_failure_names_the_rank(debian_dir):
    with pytest.raises(RuntimeError, match=r'DDP worker rank 1 of 2 exited with code 1: '
                                           r'RuntimeError: rank 1 was asked to fail'):
        d2l.run_ddp(2, num_epochs=1, batch_size=8, max_examples=32, timeout=300,
                    fail_rank=1)
    assert not _children()


def test_ddp_timeout_cleans_up(debian_dir):
    with pytest.raises(TimeoutError, match='within 1 s'):
        d2l.run_ddp(2, num_epochs=1, batch_size=8, max_examples=32, timeout=1)
    assert not _children()


def test_ddp_rejects_missing_gpus(monkeypatch):
    monkeypatch.setattr(book, 'num_gpus', lambda: 1)
    monkeypatch.setattr(book, 'gpu_name', lambda i: 'NVIDIA H200')
    with pytest.raises(ValueError, match='asked for 2 GPUs but this machine has 1'):
        d2l.run_ddp(2, backend='nccl')


def test_ddp_refuses_cuda_graph_with_several_processes(monkeypatch):
    """Capturing the DDP step hung with two processes on 2x H200: refused at once."""
    monkeypatch.setattr(book, 'num_gpus', lambda: 2)
    monkeypatch.setattr(book, 'gpu_name', lambda i: 'NVIDIA H200')
    before = _children()
    with pytest.raises(ValueError, match='cuda_graph=True with world_size=2'):
        d2l.run_ddp(2, backend='nccl', cuda_graph=True)
    assert _children() == before
