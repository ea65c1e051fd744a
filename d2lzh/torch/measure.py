"""What notebook 07 and bench/ measure alike (beyond the book): the ladder of
techniques (:data:`LADDER`, a step trained by :func:`train_ladder_step`), and time to
accuracy from a cold start: :func:`cold_start` runs this file as a fresh process, which
times each stage of what a user writes: ``dev = d2l.try_gpu()``,
``d2l.load_data_fashion_mnist(recipe.batch_size, device=dev)``,
``d2l.train_fast(d2l.resnet18(10, conv_bias=False), ..., dev, recipe)``."""
import dataclasses
import importlib
import json
import os
import subprocess
import sys
import time

#: Notebook 07's ladder of techniques, bench_torch.py's too: (key, name, Chinese label,
#: the step it builds on, what it changes of LADDER_BASE); data: 'host' (the book's
#: pageable batches), 'pinned' or 'gpu' (the whole set on the GPU).
LADDER_BASE = dict(data='host', cudnn_benchmark=False, amp=False, channels_last=False,
                   compile=False, cuda_graph=False)
LADDER = [('a', 'book', '书中写法', None, {}),
          ('b', 'pinned', '锁页内存', 'a', {'data': 'pinned'}),
          ('c', 'gpu_data', '数据放在 GPU 上', 'b', {'data': 'gpu'}),
          ('d', 'cudnn_benchmark', 'cuDNN 自动调优', 'c', {'cudnn_benchmark': True}),
          ('e', 'bf16', 'bf16', 'd', {'amp': True}),
          ('f', 'channels_last', 'channels_last', 'e', {'channels_last': True}),
          ('g', 'compile', 'torch.compile', 'f', {'compile': True}),
          ('g2', 'cuda_graph', 'CUDA 图', 'f', {'cuda_graph': True}),
          ('g3', 'graph_compile', 'CUDA 图＋编译', 'g2', {'compile': True})]


def ladder_configs():
    """{key: the configuration of that step of LADDER} (a dict like LADDER_BASE)."""
    configs = {}
    for key, _, _, parent, change in LADDER:
        configs[key] = {**(configs[parent] if parent else LADDER_BASE), **change}
    return configs


def ladder_recipe(config, **fields):
    """The :class:`~d2lzh.torch.recipe.Recipe` of a ladder step's ``config`` (its
    ``amp`` True is 'auto', else 'off'), with Recipe's other ``fields`` (batch_size, lr,
    ...). ValueError: Recipe's, for a field of the wrong type or range."""
    from .recipe import Recipe  # here: this file runs as a fresh process, without torch
    return Recipe(amp='auto' if config['amp'] else 'off',
                  channels_last=config['channels_last'], compile=config['compile'],
                  cuda_graph=config['cuda_graph'], **fields)


def train_ladder_step(config, train_iter, test_iter, epochs, lr, device, verbose=True,
                      **fields):
    """Train a fresh ResNet-18 (book 8.5) as a step of LADDER says (notebook 07,
    bench). ``config``: ``ladder_configs()[key]``; the iterators yield float32 (batch,
    1, 28, 28) and int64 (batch,) where ``config['data']`` says; ``fields``: more of
    Recipe's. The book's step without ``fields`` trains with 8.5's ``d2l.train``,
    others with ``d2l.train_fast``. Returns its history. ValueError: Recipe's,
    train_fast's."""
    import torch
    from .book import resnet18
    from .recipe import train_fast
    from .train import train
    torch.backends.cudnn.benchmark = config['cudnn_benchmark']
    if config['compile']:  # forget the shapes that a step compiled before has seen
        torch._dynamo.reset()
    torch.manual_seed(0)
    if not fields and ladder_recipe(config) == ladder_recipe(LADDER_BASE):
        return train(resnet18(10), train_iter, test_iter, epochs, lr, device, verbose)
    recipe = ladder_recipe(config, batch_size=train_iter.batch_size, epochs=epochs,
                           lr=lr, **fields)
    return train_fast(resnet18(10), train_iter, test_iter, device, recipe, verbose)


def cold_start(config=None, timeout=600.0, env=None, setup=None):
    """Run one fresh process (``env`` added to this one's). ``config`` (JSON-able):
    ``recipe`` (Recipe's fields; FAST), ``conv_bias`` (False), ``cudnn_benchmark``
    (False), ``gpu_data`` (True), ``seed`` (0), ``max_examples`` ('all'), ``target``
    (0.92 without the recipe's). ``setup`` ``('module:name', *args)``: ``name(recipe,
    *args)`` after the CUDA context -> ``(recipe, wrap)``, ``wrap(model)`` trained (None:
    the model). Returns ``items``: seconds of python_start, import_torch, import_d2lzh,
    cuda_init, setup (with one), data, startup, epochs, evals, other (model, optimizer);
    ``total_s``; ``reached_s`` to the target (None: never); train_fast's ``history``.
    RuntimeError: the process failed; TimeoutExpired."""
    env = dict(os.environ, **(env or {}), D2LZH_COLDSTART_T0=repr(time.time()))
    env['PYTHONPATH'] = os.pathsep.join(  # this d2lzh, for the process started by path
        [os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
         env.get('PYTHONPATH', '')]).rstrip(os.pathsep)
    config = {**(config or {}), **({'setup': list(setup)} if setup else {})}
    proc = subprocess.run(
        [sys.executable, os.path.abspath(__file__), json.dumps(config)], env=env,
        capture_output=True, text=True, timeout=timeout)
    for line in proc.stdout.splitlines():
        if line.startswith('COLDSTART '):
            return json.loads(line[len('COLDSTART '):])
    tail = '\n'.join((proc.stdout + proc.stderr).strip().splitlines()[-8:])
    raise RuntimeError(f'冷启动的新进程以退出码 {proc.returncode} 结束：\n{tail}')


def _reached(history, start, target):
    """Seconds from the process start to the first test accuracy >= ``target``:
    train_fast's own mark, else start-up, epochs and evaluations added up."""
    if history['reached'] is not None:
        return start + history['reached']['seconds']
    elapsed, evals = start + history['startup_s'], iter(history['eval_times'])
    for seconds, acc in zip(history['epoch_times'], history['test_acc']):
        elapsed += seconds + (next(evals) if acc is not None else 0.0)
        if acc is not None and acc >= target:
            return elapsed
    return None


def _main(config):
    """The fresh process (run by path: no torch before its first item)."""
    t0, items = float(os.environ.get('D2LZH_COLDSTART_T0') or time.time()), {}

    def done(item):  # the stage ``item`` ends now
        items[item] = time.time() - t0 - sum(items.values())

    done('python_start')
    import torch
    done('import_torch')
    from d2lzh import torch as d2l
    done('import_d2lzh')
    dev = d2l.try_gpu()
    torch.empty(1, device=dev)
    d2l.synchronize(dev)
    done('cuda_init')
    recipe = d2l.Recipe(**config['recipe']) if 'recipe' in config else d2l.FAST
    wrap = None
    if 'setup' in config:
        (module, name), args = config['setup'][0].split(':'), config['setup'][1:]
        recipe, wrap = getattr(importlib.import_module(module), name)(recipe, *args)
        done('setup')
    train_iter, test_iter = d2l.load_data_fashion_mnist(
        recipe.batch_size, max_examples=config.get('max_examples', 'all'),
        device=dev if config.get('gpu_data', True) else None)
    d2l.synchronize(dev)
    done('data')
    torch.backends.cudnn.benchmark = config.get('cudnn_benchmark', False)
    torch.manual_seed(config.get('seed', 0))
    net = d2l.resnet18(10, conv_bias=config.get('conv_bias', False))
    start = time.time() - t0
    history = d2l.train_fast(wrap(net) if wrap else net, train_iter, test_iter, dev,
                             recipe, verbose=False)
    end = time.time() - t0
    items.update(startup=history.startup_s, epochs=sum(history.epoch_times),
                 evals=sum(history.eval_times))
    items['other'] = end - sum(items.values())
    print('COLDSTART ' + json.dumps({
        'items': items, 'total_s': end, 'history': dataclasses.asdict(history),
        'device': str(dev),
        'reached_s': _reached(history, start, config.get('target', 0.92)),
        'torch': torch.__version__}), flush=True)


if __name__ == '__main__':
    sys.path.pop(0)  # this file's folder: its modules are d2lzh.torch's, not top-level
    _main(json.loads(sys.argv[1]))
