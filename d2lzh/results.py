"""What a notebook measured (beyond the book): key figures for ``make run``'s summary
(:func:`record`), benchmark JSONs it quotes (:func:`load_reference`)."""
import json
import os
from pathlib import Path

from . import project
from .setup.gpus import gpus_in_use

#: A URL :func:`load_reference` downloads from instead of the repository.
REFERENCE_URL_ENV = 'D2LZH_REFERENCE_URL'
#: What a figure is (:func:`record`'s ``kind``): a speed-up (time before / after), a
#: ratio stated without a verdict, a test accuracy.
KINDS = ('speedup', 'ratio', 'accuracy')


def record(key, value, unit='', note=None, *, what=None, tags=(), spread=None,
           headline=False, kind=None, subset='chosen'):
    """Keep one measured figure for ``make run``'s summary; returns ``value`` unchanged.
    With ``$D2LZH_RESULTS`` naming a file, appends it there as a JSON line, with the
    GPUs the framework could use.

    ``key`` (str), ``value`` (float, int or str), ``unit`` (e.g. ``'s'``; ``'x'``: a
    speed-up, charted); ``note``: free text; ``what``: the figure in words, in the
    notebook's language; ``tags``: what a reader must know it was measured on;
    ``spread``: (low, high) over repeats, in ``unit``, unrounded; ``headline`` (bool);
    ``kind``: one of :data:`KINDS` or None (the summary guesses); ``subset``: its
    training images (default: the last choice of :func:`d2lzh.data.choose_max_examples`;
    None: none). ValueError: an argument of the wrong type or form."""
    if not isinstance(key, str) or not key:
        raise ValueError(f'record 的 key={key!r} 无效：请用非空的字符串')
    for name, text in (('note', note), ('what', what)):
        if text is not None and not isinstance(text, str):
            raise ValueError(f'record 的 {name}={text!r} 无效：请用字符串或 None')
    if spread is not None and len(spread) != 2:
        raise ValueError(f'record 的 spread={spread!r} 无效：请用 (low, high) 两个数')
    if kind is not None and kind not in KINDS:
        raise ValueError(f'record 的 kind={kind!r} 无效：请用 {KINDS} 之一或 None')
    if path := os.environ.get('D2LZH_RESULTS'):
        from . import data  # here: `import d2lzh` stays free of numpy
        subset = data.CONTEXT.get('subset') if subset == 'chosen' else subset
        item = dict(key=key, value=value, unit=unit, subset=subset, gpus=gpus_in_use(),
                    note=note, what=what, tags=list(tags),
                    spread=None if spread is None else [float(x) for x in spread],
                    headline=bool(headline), kind=kind)
        with open(path, 'a', encoding='utf-8') as f:
            f.write(json.dumps(item, ensure_ascii=False) + '\n')
    return value


def output_dir():
    """The folder (:class:`pathlib.Path`, created if needed) a notebook writes files
    into: ``$D2LZH_OUTPUT_DIR``, else ``./d2lzh-output``."""
    folder = Path(os.environ.get('D2LZH_OUTPUT_DIR') or 'd2lzh-output')
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def load_reference(path, timeout=30):
    """The parsed JSON file ``path`` (with ``/``) of the repository: read from the
    checkout d2lzh is imported from, else (Colab, Kaggle ...) downloaded from
    ``$D2LZH_REFERENCE_URL`` or the repository, never stored. None when neither
    worked, after one printed line saying why."""
    local = Path(os.path.abspath(__file__)).parents[1].joinpath(*path.split('/'))
    if os.path.isfile(local):
        return json.loads(local.read_text(encoding='utf-8'))
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
