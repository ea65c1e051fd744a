"""What a notebook measured (beyond the book): :func:`record` keeps a key figure for ``make
run``'s summary (with the data subset :func:`d2lzh.data.choose_max_examples` chose), and
:func:`load_reference` reads a benchmark JSON of the repository that a notebook quotes.
"""
import json
import os

from . import project
from .setup.gpus import gpus_in_use

#: Where :func:`load_reference` downloads from instead of the repository: a URL ending in
#: ``/`` (``file://CHECKOUT/`` when scripts/cloud_runtime.py stands a checkout in for it).
REFERENCE_URL_ENV = 'D2LZH_REFERENCE_URL'
#: What a figure is, for the summary (:func:`record`'s ``kind``): a speed-up (time before / time
#: after, charted), a ratio the notebook states without a verdict, a test accuracy; None: not said.
KINDS = ('speedup', 'ratio', 'accuracy')


def record(key, value, unit='', note=None, *, what=None, tags=(), spread=None,
           headline=False, kind=None, subset='chosen'):
    """Keep one measured figure for ``make run``'s summary; returns ``value`` unchanged.
    With ``$D2LZH_RESULTS`` naming a file (``make run`` sets one per notebook) it is appended
    there as a JSON line, with the data subset and the GPUs the framework could use.

    ``key`` (str): e.g. ``'hybridize_speedup'``; ``value`` (float, int or str) as measured;
    ``unit``: e.g. ``'s'``, ``'images/s'``, ``'x'`` (a speed-up: the summary charts it);
    ``note``: free text; ``what``: the figure in words, in the notebook's language (the
    summary's line, the chart's label); ``tags``: what it was measured on that a reader must
    know, e.g. ``['2 个设备 = 同一组 CPU 核心']``; ``spread``: (low, high) over repeats, in
    ``unit``, unrounded like ``value`` (the summary rounds); ``headline``: the notebook's
    headline figure; ``kind``: one of :data:`KINDS` or None (the summary guesses from
    ``unit`` and ``key``); ``subset``: its training images (default: the last choice of
    :func:`d2lzh.data.choose_max_examples`; None: no subset). ValueError names an argument
    of the wrong type or form."""
    if not isinstance(key, str) or not key:
        raise ValueError(f'record 的 key={key!r} 无效：请用非空的字符串')
    for name, text in (('note', note), ('what', what)):
        if text is not None and not isinstance(text, str):
            raise ValueError(f'record 的 {name}={text!r} 无效：请用字符串或 None')
    if spread is not None and len(spread) != 2:
        raise ValueError(f'record 的 spread={spread!r} 无效：请用 (low, high) 两个数')
    if kind is not None and kind not in KINDS:
        raise ValueError(f'record 的 kind={kind!r} 无效：请用 {KINDS} 之一或 None')
    path = os.environ.get('D2LZH_RESULTS')
    if path:
        from . import data  # here, not at the top: `import d2lzh` stays free of numpy
        subset = data.CONTEXT.get('subset') if subset == 'chosen' else subset
        item = {'key': key, 'value': value, 'unit': unit, 'subset': subset,
                'gpus': gpus_in_use(), 'note': note, 'what': what, 'tags': list(tags),
                'spread': None if spread is None else [float(x) for x in spread],
                'headline': bool(headline), 'kind': kind}
        with open(path, 'a', encoding='utf-8') as f:
            f.write(json.dumps(item, ensure_ascii=False) + '\n')
    return value


def output_dir():
    """The folder a notebook writes its files into (profiler traces ...): ``$D2LZH_OUTPUT_DIR``
    (``make run`` points it into its build folder), else ``d2lzh-output`` in the working
    directory. Created if needed; returns a :class:`pathlib.Path`."""
    from pathlib import Path
    folder = Path(os.environ.get('D2LZH_OUTPUT_DIR') or 'd2lzh-output')
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def load_reference(path, timeout=30):
    """The parsed JSON file ``path`` (with ``/``, e.g. ``'bench/results/....json'``) of the
    repository that a notebook quotes (beyond the book): from the checkout d2lzh is imported
    from; for a notebook opened alone (Colab, Kaggle, Studio Lab), downloaded from
    ``$D2LZH_REFERENCE_URL`` or the repository (:func:`d2lzh.project.url`), never written
    anywhere. None when neither worked, after one printed line saying why."""
    local = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                         *path.split('/'))
    if os.path.isfile(local):
        with open(local, encoding='utf-8') as f:
            return json.load(f)
    base = os.environ.get(REFERENCE_URL_ENV)
    url = base.rstrip('/') + '/' + path if base else project.url(path)
    why = '不知道仓库的网址'
    if url is not None:
        import urllib.request
        try:
            with urllib.request.urlopen(url, timeout=timeout) as response:
                return json.loads(response.read().decode('utf-8'))
        except (OSError, ValueError) as err:  # no network, HTTP error, not JSON
            why = f'下载 {url} 失败（{type(err).__name__}: {err}）'
    print(f'd2lzh：这里没有 {path}（本笔记本不是在仓库里打开的），而且{why}；'
          '跳过用到它的内容，继续运行')
    return None
