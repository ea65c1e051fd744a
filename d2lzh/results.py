"""Key figures measured by a notebook, collected for ``make run``'s summary (beyond the book).

A notebook calls ``d2l.record('hybridize_speedup', 2.4, 'x')``. When the
environment variable ``D2LZH_RESULTS`` names a file (``make run`` sets one per
notebook), the figure is appended to it as one JSON line; otherwise it is
only kept in memory (:data:`RECORDED`). The value is returned unchanged.

Each figure also carries what it was measured on, so that the summary can say
what it means on the reader's machine:

* ``subset``: the number of training images of the data subset the notebook
  chose last (:func:`note_data_subset`, called by
  ``d2l.choose_max_examples``), or None for the full data set or when the
  notebook trains nothing;
* ``gpus``: how many GPUs the notebook's framework could use when the figure
  was recorded (None when no framework helper was imported);
* ``note``: free text given by the notebook (``record(..., note='...')``).

The summary recognises accuracies by ``acc`` in the key and two-device
comparisons by ``2dev``, ``2v1``, ``two_device``, ``2workers``, ``ddp`` or
``dp_`` in the key: name new keys that way.
"""
import json
import os
import sys

#: ``{key: (value, unit)}`` of every figure recorded in this process.
RECORDED = {}
#: What the figures recorded from now on were measured on (see the module doc).
CONTEXT = {}


def note_data_subset(num_train, gpu_available=None):
    """Say which part of Fashion-MNIST the following figures were trained on.

    Called by ``d2l.choose_max_examples``; notebooks rarely need it directly.

    Args:
        num_train (int or None): training images used (the first N of
            60,000), None for the full data set.
        gpu_available (bool or None): whether the framework found a GPU.

    Raises:
        ValueError: ``num_train`` is neither None nor a positive int.
    """
    if num_train is not None and (isinstance(num_train, bool) or not isinstance(num_train, int)
                                  or num_train < 1):
        raise ValueError(f'note_data_subset: num_train must be a positive int or None, '
                         f'got {num_train!r}')
    CONTEXT['subset'] = num_train
    if gpu_available is not None:
        CONTEXT['gpu_available'] = bool(gpu_available)


def _gpus_in_use():
    """GPUs usable by the framework helper the notebook imported, or None."""
    torch_helpers = sys.modules.get('d2lzh.torch')
    if torch_helpers is not None:
        return int(torch_helpers.num_gpus())
    mxnet_helpers = sys.modules.get('d2lzh.mxnet')
    if mxnet_helpers is not None:
        return sum(1 for ctx in mxnet_helpers.try_all_gpus() if ctx.device_type == 'gpu')
    return None


def record(key, value, unit='', note=None):
    """Keep one measured figure.

    Args:
        key (str): short name, e.g. ``'epoch_time_2dev'`` (see the module doc
            for the words the summary recognises).
        value (float, int or str): the figure as measured.
        unit (str): e.g. ``'s'``, ``'images/s'``, ``'x'``.
        note (str or None): shown beside the figure in ``make run``'s summary,
            e.g. ``'cpu(0) and cpu(1) share the same cores'``.

    Returns:
        The ``value`` argument.

    Raises:
        ValueError: ``key`` is empty or not a str, or ``note`` is not a str.
    """
    if not isinstance(key, str) or not key:
        raise ValueError(f'record: key must be a non-empty str, got {key!r}')
    if note is not None and not isinstance(note, str):
        raise ValueError(f'record: note must be a str or None, got {note!r}')
    RECORDED[key] = (value, unit)
    path = os.environ.get('D2LZH_RESULTS')
    if path:
        item = {'key': key, 'value': value, 'unit': unit,
                'subset': CONTEXT.get('subset'), 'gpus': _gpus_in_use()}
        if note:
            item['note'] = note
        with open(path, 'a', encoding='utf-8') as f:
            f.write(json.dumps(item, ensure_ascii=False) + '\n')
    return value


def read_figures(path):
    """Read a file written by :func:`record`.

    Returns:
        dict: ``{key: {'value', 'unit', 'subset', 'gpus', 'note'}}`` in the
        order first recorded (a key recorded twice keeps its last value). A
        missing file gives ``{}``.

    Raises:
        ValueError: a line is not valid JSON (the message names the file).
    """
    out = {}
    if not os.path.exists(path):
        return out
    with open(path, encoding='utf-8') as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                item = json.loads(line)
            except json.JSONDecodeError as err:
                raise ValueError(f'{path}, line {number}: not a recorded figure ({err})') from err
            out[item['key']] = {'value': item['value'], 'unit': item.get('unit', ''),
                                'subset': item.get('subset'), 'gpus': item.get('gpus'),
                                'note': item.get('note')}
    return out


def read_results(path):
    """Read a file written by :func:`record` into ``{key: (value, unit)}``
    (later lines win). A missing file gives ``{}``."""
    return {k: (v['value'], v['unit']) for k, v in read_figures(path).items()}


#: Where :func:`load_reference` downloads from instead of the repository: a URL that
#: ends with ``/`` (``file://CHECKOUT/`` when scripts/cloud_runtime.py stands a checkout
#: in for the repository, as ``D2LZH_SOURCE`` does for the package).
REFERENCE_URL_ENV = 'D2LZH_REFERENCE_URL'


def _raw_url(path):
    """The download URL of ``path`` in the project's repository (from the one
    repository URL, see :func:`d2lzh.install._repository`, or
    ``$D2LZH_REFERENCE_URL``), or None."""
    base = os.environ.get(REFERENCE_URL_ENV)
    if base:
        return base.rstrip('/') + '/' + path
    from .install import _repository
    repository = _repository()
    if repository is None:
        return None
    owner, repo, branch = repository
    return f'https://raw.githubusercontent.com/{owner}/{repo}/{branch}/{path}'


def load_reference(path, timeout=30):
    """A JSON file of this project's repository that a notebook quotes, such as
    a stored benchmark run (``'bench/results/....json'``); beyond the book.

    Read from the checkout that d2lzh is imported from. A notebook opened
    alone (Colab, Kaggle, SageMaker Studio Lab) has no checkout: then the file
    is downloaded from the project's repository (the URL in pyproject's
    ``[project.urls] Source``), parsed in memory and never written anywhere.

    Args:
        path (str): the file's path in the repository, with ``/``.
        timeout (float): seconds for the download.

    Returns:
        dict or list: the parsed JSON; or None if neither worked, after one
        printed line that says why and that the notebook goes on without it
        (a notebook then skips what it would have shown from the file).
    """
    local = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                         *path.split('/'))
    if os.path.isfile(local):
        with open(local, encoding='utf-8') as f:
            return json.load(f)
    url = _raw_url(path)
    why = 'no repository URL is known' if url is None else None
    if url is not None:
        import urllib.request
        try:
            with urllib.request.urlopen(url, timeout=timeout) as response:
                return json.loads(response.read().decode('utf-8'))
        except (OSError, ValueError) as err:  # no network, HTTP error, not JSON
            why = f'downloading {url} failed ({type(err).__name__}: {err})'
    print(f'd2lzh: {path} is not here (this notebook was opened without the repository) and '
          f'{why}; going on without it: what it holds is skipped')
    return None
