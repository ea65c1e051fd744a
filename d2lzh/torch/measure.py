"""What notebook 07 and ``bench/bench_torch.py`` measure alike (beyond the book): the ladder
of techniques (:data:`LADDER`), and time to accuracy from a cold start: :func:`cold_start`
runs this file as a fresh process that marks each stage from its start and runs what a user
writes: ``dev = d2l.try_gpu()``, ``d2l.load_data_fashion_mnist(recipe.batch_size,
device=dev)``, ``d2l.train_fast(d2l.resnet18(10, conv_bias=False), ..., dev, recipe)``."""
import json
import os
import subprocess
import sys
import time


#: Notebook 07's ladder of techniques, which bench/bench_torch.py measures too: (key, name,
#: Chinese label, the step it builds on, what it changes of :data:`LADDER_BASE`); data: 'host'
#: (the book's pageable batches), 'pinned' or 'gpu' (the whole set on the GPU).
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
    """{key: the configuration of that step of :data:`LADDER`} (a dict like LADDER_BASE)."""
    configs = {}
    for key, _, _, parent, change in LADDER:
        configs[key] = {**(configs[parent] if parent else LADDER_BASE), **change}
    return configs


def ladder_recipe(config, **fields):
    """The :class:`~d2lzh.torch.recipe.Recipe` of a ladder step's ``config`` (a dict like
    LADDER_BASE: its ``amp`` True is 'auto', else 'off'; ``channels_last``, ``compile``,
    ``cuda_graph``), with Recipe's other ``fields`` (batch_size, epochs, lr, ...). A step whose
    recipe equals the book step's uses none of its techniques: notebook 07 and bench train it
    with the book's ``d2l.train``. ValueError: Recipe's, for a field of the wrong type or range."""
    from .recipe import Recipe  # here: this file also runs as a fresh process, torch unimported
    return Recipe(amp='auto' if config['amp'] else 'off', channels_last=config['channels_last'],
                  compile=config['compile'], cuda_graph=config['cuda_graph'], **fields)


def cold_start(config=None, timeout=600.0, env=None):
    """Run one fresh process, ``env`` added to this one's environment. ``config`` (JSON-able):
    ``recipe`` (Recipe's fields; default FAST), ``conv_bias`` (False), ``cudnn_benchmark``
    (False), ``gpu_data`` (True), ``seed`` (0), ``max_examples`` ('all'), ``target`` (0.92,
    for a recipe without ``target_accuracy``). Returns a dict: ``marks``, seconds from the
    start to ``python`` (interpreter up), ``import torch``, ``import d2lzh``, ``cuda`` (context
    made), ``data`` (on the device), ``train`` (train_fast called), ``end``; ``reached_s`` to
    the first test accuracy >= the target (None: never); ``history``, train_fast's.
    RuntimeError: the process failed (exit code, last lines); TimeoutExpired: past timeout s."""
    env = dict(os.environ, **(env or {}), D2LZH_COLDSTART_T0=repr(time.time()))
    env['PYTHONPATH'] = os.pathsep.join(  # this d2lzh, for the process started by path
        [os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
         env.get('PYTHONPATH', '')]).rstrip(os.pathsep)
    proc = subprocess.run([sys.executable, os.path.abspath(__file__), json.dumps(config or {})],
                          env=env, capture_output=True, text=True, timeout=timeout)
    for line in proc.stdout.splitlines():
        if line.startswith('COLDSTART '):
            return json.loads(line[len('COLDSTART '):])
    tail = '\n'.join((proc.stdout + proc.stderr).strip().splitlines()[-8:])
    raise RuntimeError(f'冷启动的新进程以退出码 {proc.returncode} 结束：\n{tail}')


def _reached(history, start, target):
    """Seconds from the process start to the first test accuracy >= ``target``: train_fast's
    own mark where the recipe had a target, else start-up, epochs and evaluations added up."""
    if history['reached'] is not None:
        return start + history['reached']['seconds']
    elapsed, evals = start + history['startup_s'], iter(history['eval_times'])
    for seconds, acc in zip(history['epoch_times'], history['test_acc']):
        elapsed += seconds + (next(evals) if acc is not None else 0.0)
        if acc is not None and acc >= target:
            return elapsed
    return None


def _main(config):
    """The fresh process (run by path: no d2lzh.torch, so no torch, before the first mark)."""
    t0 = float(os.environ.get('D2LZH_COLDSTART_T0') or time.time())
    marks = {'python': time.time() - t0}
    import torch
    marks['import torch'] = time.time() - t0
    from d2lzh import torch as d2l
    marks['import d2lzh'] = time.time() - t0
    dev = d2l.try_gpu()
    torch.empty(1, device=dev)
    d2l.synchronize(dev)
    marks['cuda'] = time.time() - t0
    recipe = d2l.Recipe(**config['recipe']) if 'recipe' in config else d2l.FAST
    train_iter, test_iter = d2l.load_data_fashion_mnist(
        recipe.batch_size, max_examples=config.get('max_examples', 'all'),
        device=dev if config.get('gpu_data', True) else None)
    d2l.synchronize(dev)
    marks['data'] = time.time() - t0
    torch.backends.cudnn.benchmark = config.get('cudnn_benchmark', False)
    torch.manual_seed(config.get('seed', 0))
    marks['train'] = time.time() - t0
    history = d2l.train_fast(d2l.resnet18(10, conv_bias=config.get('conv_bias', False)),
                             train_iter, test_iter, dev, recipe, verbose=False)
    marks['end'] = time.time() - t0
    reached = _reached(history, marks['train'], config.get('target', 0.92))
    print('COLDSTART ' + json.dumps({'marks': marks, 'reached_s': reached, 'history': history,
                                     'device': str(dev), 'torch': torch.__version__}), flush=True)


if __name__ == '__main__':
    sys.path.pop(0)  # this file's folder: its modules are d2lzh.torch's, not top-level ones
    _main(json.loads(sys.argv[1]))
