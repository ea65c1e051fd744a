"""d2lzh.mxnet (the book API of d2lzh/mxnet/book.py): devices, models, split/allreduce,
evaluation, data iterators."""
import subprocess
import sys

import numpy as np
import pytest

import d2lzh as d2l
import d2lzh.mxnet
from d2lzh.mxnet import book as dm
from d2lzh.mxnet import mx, nd

CPUS = [mx.cpu(i) for i in range(4)]


# --------------------------------------------------------------------- devices

def test_no_gpu_gives_cpu(monkeypatch):
    monkeypatch.setattr(dm, '_working_gpus', lambda: ())
    assert d2l.try_gpu() == mx.cpu()
    assert d2l.try_all_gpus() == [mx.cpu()]
    assert d2l.try_devices(3) == [mx.cpu(0), mx.cpu(1), mx.cpu(2)]


def test_unusable_gpu_falls_back_with_a_warning(monkeypatch):
    """A GPU that the build cannot run (here: the CPU build pretending to see
    one) must be probed with a real kernel and skipped with a warning."""
    dm._working_gpus.cache_clear()
    monkeypatch.setattr(mx.context, 'num_gpus', lambda: 1)
    monkeypatch.setattr(dm, 'gpu_name', lambda i: 'NVIDIA H100 80GB HBM3')
    try:
        with pytest.warns(RuntimeWarning, match=r'GPU 0（NVIDIA H100 80GB HBM3）.*不能在它上面运行'):
            assert d2l.try_gpu() == mx.cpu()
        assert d2l.try_all_gpus() == [mx.cpu()]  # probed once, remembered
    finally:
        dm._working_gpus.cache_clear()


@pytest.mark.parametrize('bad', [0, -1, 1.5, '2', True])
def test_try_devices_rejects(bad):
    with pytest.raises(ValueError, match='num=.* 无效：请用正整数'):
        d2l.try_devices(bad)


def test_gpu_name_from_nvidia_smi_or_a_fallback(monkeypatch):
    from d2lzh.setup.gpus import GPU, GPUQueryError
    monkeypatch.setattr(dm, 'query_gpus', lambda: [GPU('Tesla T4', (7, 5))])
    assert dm.gpu_name(0) == 'Tesla T4' and dm.gpu_name(1) == 'gpu(1)'

    def no_driver():
        raise GPUQueryError('NVIDIA-SMI has failed')
    monkeypatch.setattr(dm, 'query_gpus', no_driver)
    assert dm.gpu_name(0) == 'gpu(0)'


def test_package_gives_the_book_api_and_imports_mxnet_only_when_used():
    """A ps-lite server runs inside `import mxnet`: importing the package, its worker program
    and its launcher must not import MXNet; the first book name does."""
    code = ('import sys, d2lzh.mxnet, d2lzh.mxnet.dist, d2lzh.mxnet.launch\n'
            "assert 'mxnet' not in sys.modules, 'imported MXNet'\n"
            'import d2lzh as d2l\n'
            'assert d2l.try_gpu is d2lzh.mxnet.try_gpu is d2lzh.mxnet.book.try_gpu\n'
            "assert 'mxnet' in sys.modules\n")
    subprocess.run([sys.executable, '-c', code], check=True, timeout=300)
    assert set(d2lzh.mxnet.__all__) <= set(dir(d2lzh.mxnet))
    with pytest.raises(AttributeError, match="'d2lzh.mxnet' 没有属性 'train'"):
        d2lzh.mxnet.train


# ------------------------------------------------------------- split_and_load

def test_describe_devices_says_what_runs(monkeypatch):
    monkeypatch.setattr(dm, '_working_gpus', lambda: ())
    text = d2l.describe_devices(d2l.try_devices(2), 2)
    assert 'cpu(0), cpu(1)' in text and 'CPU' in text
    short = d2l.describe_devices([mx.gpu(0)], 2)
    assert '只有 1 个' in short and 'gpu(0)' in short
    assert d2l.describe_devices([mx.gpu(0), mx.gpu(1)], 2).startswith('在 2 块 GPU 上运行')
    assert d2l.describe_devices([mx.cpu(0)], 1) == '没有可用的 GPU：在 CPU 上下文 cpu(0) 上运行。'


def test_split_and_load_even():
    X = nd.arange(24).reshape((6, 4))
    parts = d2l.split_and_load(X, CPUS[:3])
    assert [p.shape for p in parts] == [(2, 4)] * 3
    assert [p.context for p in parts] == CPUS[:3]
    np.testing.assert_array_equal(np.concatenate([p.asnumpy() for p in parts]), X.asnumpy())


def test_split_and_load_matches_gluon():
    X = nd.arange(32).reshape((8, 4))
    ours = d2l.split_and_load(X, CPUS[:2])
    theirs = mx.gluon.utils.split_and_load(X, CPUS[:2])
    for a, b in zip(ours, theirs):
        assert a.context == b.context
        np.testing.assert_array_equal(a.asnumpy(), b.asnumpy())


def test_split_and_load_uneven_raises_with_the_fix():
    with pytest.raises(ValueError) as info:
        d2l.split_and_load(nd.zeros((7, 2)), CPUS[:2])
    message = str(info.value)
    assert '不能把 7 个样本的批量均分到 2 个设备上' in message
    assert '2 的倍数' in message and 'even_split=False' in message


def test_split_and_load_uneven_allowed():
    parts = d2l.split_and_load(np.arange(7), CPUS[:3], even_split=False)
    assert [p.shape[0] for p in parts] == [2, 2, 3]
    assert np.concatenate([p.asnumpy() for p in parts]).tolist() == list(range(7))


def test_split_and_load_other_axis():
    parts = d2l.split_and_load(nd.ones((3, 4)), CPUS[:2], batch_axis=1)
    assert [p.shape for p in parts] == [(3, 2), (3, 2)]


def test_split_and_load_fewer_examples_than_devices():
    with pytest.raises(ValueError, match='不能把 1 个样本的批量均分到 2 个设备上：批量大小要是 2 的倍数$'):
        d2l.split_and_load(nd.zeros((1, 2)), CPUS[:2], even_split=False)


# ------------------------------------------------------------------ allreduce

def test_allreduce_sums_in_place_on_every_device():
    data = [nd.ones((2, 3), ctx=c) * (i + 1) for i, c in enumerate(CPUS[:3])]
    ids = [id(d) for d in data]
    d2l.allreduce(data)
    assert [id(d) for d in data] == ids
    for d, c in zip(data, CPUS[:3]):
        assert d.context == c
        np.testing.assert_array_equal(d.asnumpy(), np.full((2, 3), 6.0))


def test_allreduce_random_values():
    rng = np.random.default_rng(1)
    values = [rng.normal(size=(5,)).astype(np.float32) for _ in range(4)]
    data = [nd.array(v, ctx=c) for v, c in zip(values, CPUS)]
    d2l.allreduce(data)
    for d in data:
        np.testing.assert_allclose(d.asnumpy(), sum(values), rtol=1e-6)


def test_get_params_copies_with_gradients():
    params = [nd.ones((2,)), nd.zeros((3,))]
    copies = d2l.get_params(params, mx.cpu(1))
    assert [p.context for p in copies] == [mx.cpu(1)] * 2
    assert all(p.grad is not None and p.grad.context == mx.cpu(1) for p in copies)
    copies[0][:] = 5
    assert params[0].asnumpy().tolist() == [1.0, 1.0]


def test_sgd_updates_in_place():
    w = nd.array([1.0, 2.0])
    w.attach_grad()
    with mx.autograd.record():
        loss = (w * w).sum()
    loss.backward()
    d2l.sgd([w], lr=0.5, batch_size=2)
    np.testing.assert_allclose(w.asnumpy(), [0.5, 1.0])


# --------------------------------------------------------- evaluate_accuracy

def _oracle(labels_to_hit):
    """A 'net' whose prediction is right exactly where labels_to_hit says."""
    def net(X):
        ids = X[:, 0].asnumpy().astype(int)
        pred = np.where(labels_to_hit[ids, 1] == 1, labels_to_hit[ids, 0],
                        (labels_to_hit[ids, 0] + 1) % 10)
        return nd.one_hot(nd.array(pred, ctx=X.context), 10)
    return net


@pytest.mark.parametrize('num_ctx', [1, 2, 3, 4])
@pytest.mark.parametrize('batch_size', [1, 2, 5, 7])
def test_evaluate_accuracy_any_devices_any_batch(num_ctx, batch_size):
    n = 11  # last batch smaller than the device count for several cases
    rng = np.random.default_rng(num_ctx * 10 + batch_size)
    labels = rng.integers(0, 10, n)
    hit = rng.integers(0, 2, n)
    X = np.stack([np.arange(n), np.zeros(n)], axis=1).astype(np.float32)
    batches = [(nd.array(X[i:i + batch_size]), nd.array(labels[i:i + batch_size], dtype='int32'))
               for i in range(0, n, batch_size)]
    acc = d2l.evaluate_accuracy(batches, _oracle(np.stack([labels, hit], 1)), CPUS[:num_ctx])
    assert acc == pytest.approx(hit.mean())


def test_evaluate_accuracy_single_context_and_databatch():
    X, y = nd.array([[0, 0], [1, 0]]), nd.array([0, 1])
    batch = mx.io.DataBatch(data=[X], label=[y])
    net = _oracle(np.array([[0, 1], [1, 0]]))
    assert d2l.evaluate_accuracy([batch], net, mx.cpu()) == 0.5
    with pytest.raises(ValueError, match='没有给出任何样本'):
        d2l.evaluate_accuracy([], net)


# ----------------------------------------------------------------------- models

def test_resnet18_same_output_after_hybridize():
    mx.random.seed(0)
    net = d2l.resnet18(10)
    net.initialize(mx.init.Xavier())
    X = nd.random.uniform(shape=(2, 1, 28, 28))
    before = net(X).asnumpy()
    net.hybridize()
    after = net(X).asnumpy()
    assert before.shape == (2, 10)
    np.testing.assert_allclose(before, after, rtol=1e-5, atol=1e-6)
    convs = [n for n in net.collect_params() if n.endswith('weight') and 'conv' in n]
    assert len(convs) == 1 + 8 * 2 + 3  # stem, 16 block convs, 3 projections


@pytest.mark.parametrize('use_1x1conv, strides, shape', [
    (False, 1, (4, 3, 6, 6)), (True, 1, (4, 8, 6, 6)), (True, 2, (4, 8, 3, 3))])
def test_residual_shapes_and_hybridize(use_1x1conv, strides, shape):
    blk = d2l.Residual(shape[1], use_1x1conv=use_1x1conv, strides=strides)
    blk.initialize()
    X = nd.random.uniform(shape=(4, 3, 6, 6))
    out = blk(X)
    assert out.shape == shape
    blk.hybridize()
    np.testing.assert_allclose(blk(X).asnumpy(), out.asnumpy(), rtol=1e-5, atol=1e-6)


def test_lenet_is_the_network_of_section_8_4():
    mx.random.seed(0)
    net = d2lzh.mxnet.lenet()
    net.initialize(mx.init.Xavier())
    X = nd.random.uniform(shape=(2, 1, 28, 28))
    before = net(X).asnumpy()
    assert before.shape == (2, 10)
    # conv 3x3 (20), avg pool 2, conv 5x5 (50), avg pool 2 -> 50 x 4 x 4, dense 128, dense 10
    assert [p.shape for p in net.collect_params().values()] == [
        (20, 1, 3, 3), (20,), (50, 20, 5, 5), (50,), (128, 800), (128,), (10, 128), (10,)]
    assert [type(b).__name__ for b in net] == ['Conv2D', 'AvgPool2D', 'Conv2D', 'AvgPool2D',
                                              'Dense', 'Dense']
    net.hybridize()
    np.testing.assert_allclose(net(X).asnumpy(), before, rtol=1e-5, atol=1e-6)


# ------------------------------------------------------------------ data iterators

def test_load_data_fashion_mnist_iterators(isolated, tiny_dataset):
    folder, arrays = tiny_dataset
    train_iter, test_iter = d2l.load_data_fashion_mnist(5, root=folder)
    assert len(train_iter) == 3 and len(test_iter) == 1
    batches = list(test_iter)
    X, y = batches[0]
    assert X.shape == (5, 1, 28, 28) and X.dtype == np.float32 and y.dtype == np.int32
    np.testing.assert_allclose(X.asnumpy()[:, 0], arrays['test_images'] / 255, rtol=1e-6)
    assert [b[0].shape[0] for b in train_iter] == [5, 5, 2]
    seen = np.sort(np.concatenate([b[1].asnumpy() for b in train_iter]))
    np.testing.assert_array_equal(seen, np.sort(arrays['train_labels']))
    X, _ = next(iter(d2l.load_data_fashion_mnist(4, resize=32, root=folder)[1]))
    assert X.shape == (4, 1, 32, 32)


@pytest.mark.parametrize('kwargs, name', [
    ({'batch_size': 0}, 'batch_size'), ({'batch_size': -2}, 'batch_size'),
    ({'batch_size': 2.5}, 'batch_size'), ({'batch_size': '256'}, 'batch_size'),
    ({'batch_size': True}, 'batch_size'), ({'batch_size': 8, 'resize': 0}, 'resize'),
    ({'batch_size': 8, 'resize': 28.0}, 'resize')])
def test_load_data_rejects_bad_arguments(kwargs, name):
    with pytest.raises(ValueError, match=f'{name}=.* 无效：请用正整数'):
        d2l.load_data_fashion_mnist(**kwargs)


def test_load_data_rejects_bad_env(monkeypatch):
    monkeypatch.setenv('D2LZH_MAX_EXAMPLES', '-1')
    with pytest.raises(ValueError, match='D2LZH_MAX_EXAMPLES'):
        d2l.load_data_fashion_mnist(8)


def test_choose_max_examples(monkeypatch, capsys):
    monkeypatch.delenv('D2LZH_MAX_EXAMPLES', raising=False)
    assert d2l.choose_max_examples(2000, gpu_available=False) == 2000
    assert '2000/60000' in capsys.readouterr().out
    assert d2l.choose_max_examples(2000, gpu_available=True) is None
    assert '60000' in capsys.readouterr().out
    monkeypatch.setenv('D2LZH_MAX_EXAMPLES', 'all')
    assert d2l.choose_max_examples(2000, gpu_available=False) is None
    monkeypatch.setenv('D2LZH_MAX_EXAMPLES', '300')
    assert d2l.choose_max_examples(2000, gpu_available=True) == 300


def test_real_fashion_mnist_batch(debian_dir, isolated, monkeypatch):
    import d2lzh.data as data
    monkeypatch.setattr(data, 'SYSTEM_DIR', debian_dir)
    train_iter, test_iter = d2l.load_data_fashion_mnist(256, max_examples=1000)
    assert len(train_iter) == 4 and train_iter.num_examples == 1000
    X, y = next(iter(test_iter))
    assert X.shape == (256, 1, 28, 28)
    assert 0.0 <= X.min().asscalar() and X.max().asscalar() == 1.0
    assert y[:3].asnumpy().tolist() == [9, 2, 1]  # first test labels: boot, pullover, trouser

