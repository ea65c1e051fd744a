"""Key figures measured by a notebook, collected for ``make run``'s summary.

A notebook calls ``d2l.record('hybridize_speedup', 2.4, 'x')``. When the
environment variable ``D2LZH_RESULTS`` names a file (``make run`` sets one per
notebook), the figure is appended to it as one JSON line; otherwise it is
only kept in memory (:data:`RECORDED`). The value is returned unchanged.
"""
import json
import os

RECORDED = {}


def record(key, value, unit=''):
    """Keep one measured figure.

    Args:
        key (str): short name, e.g. ``'epoch_time_2dev'``.
        value (float, int or str): the figure as measured.
        unit (str): e.g. ``'s'``, ``'images/s'``, ``'x'``.

    Returns:
        The ``value`` argument.

    Raises:
        ValueError: ``key`` is empty or not a str.
    """
    if not isinstance(key, str) or not key:
        raise ValueError(f'record: key must be a non-empty str, got {key!r}')
    RECORDED[key] = (value, unit)
    path = os.environ.get('D2LZH_RESULTS')
    if path:
        with open(path, 'a', encoding='utf-8') as f:
            f.write(json.dumps({'key': key, 'value': value, 'unit': unit},
                               ensure_ascii=False) + '\n')
    return value


def read_results(path):
    """Read a file written by :func:`record` into ``{key: (value, unit)}``
    (later lines win). A missing file gives ``{}``."""
    out = {}
    if not os.path.exists(path):
        return out
    with open(path, encoding='utf-8') as f:
        for line in f:
            if line.strip():
                item = json.loads(line)
                out[item['key']] = (item['value'], item.get('unit', ''))
    return out
