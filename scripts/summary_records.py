"""The records make run's summary reads (scripts/run_summary.py), read so that no record stops
it: ``build/run/<edition>/results/NAME.json`` (:func:`load_rows`; a file that is not a
notebook's record raises :class:`SummaryError`, whose message names it and the fix:
:func:`broken`), ``build/run/history.jsonl`` (:func:`load_history`: lines that are not a
run's are skipped), and the numbers a figure holds (:func:`number`, :func:`spread_of`: a
range with a missing bound is no range).
"""
import json
import math
import os
from pathlib import Path

from d2lzh.project import EDITIONS  # the checkout's: run_summary puts it on sys.path

ROOT = Path(__file__).resolve().parent.parent
HISTORY = 'history.jsonl'


def number(value):
    """Whether ``value`` is a finite int or float (not a bool)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def spread_of(fig):
    """The figure's range ``(low, high)`` as floats; None where none was recorded, or not two
    finite numbers (a missing bound)."""
    spread = fig.get('spread')
    if isinstance(spread, (list, tuple)) and len(spread) == 2 and all(map(number, spread)):
        return float(spread[0]), float(spread[1])
    return None


class SummaryError(Exception):
    """The summary could not be written; the message, in Chinese, names the record that broke it
    and what to do (:func:`broken`)."""


def broken(build, err, *records):
    """The message of a :class:`SummaryError`: what went wrong in which record files (their
    ``build/run/<edition>/results/NAME.json``), and the fix: re-run that notebook, or make clean."""
    build = Path(build)
    where = '' if build.resolve() == ROOT / 'build' else f' BUILD={_rel(build)}'
    names = '、'.join(_rel(r) for r in records) or _rel(build / 'run')
    rerun = [f'make run EDITION={Path(r).parent.parent.name} NOTEBOOKS={Path(r).stem}{where}'
             for r in records[:1]]
    return (f'{names} 让汇总出错（{type(err).__name__}: {err}）。请' +
            (f'重新运行这个笔记本（{rerun[0]}），它的新记录会替换这个文件；或者' if len(records) == 1
             else '重新运行刚才运行过的笔记本，或者') +
            f'用 make clean{where} 删掉之前的所有结果（build/lab/ 里你的笔记本副本会保留），再 make run')


def _rel(path):
    """``path`` relative to the working directory where it is inside it (for messages)."""
    path = Path(path)
    return os.path.relpath(path) if path.resolve().is_relative_to(Path.cwd()) else str(path)


def _row(path):
    """The row a results file holds, with ``record`` (the file) added and its figures as a dict
    (``{}`` where none were recorded). ValueError: not a row of a notebook's run."""
    row = json.loads(path.read_text(encoding='utf-8'))
    if not isinstance(row, dict) or not all(isinstance(row.get(k), str) and row[k]
                                            for k in ('edition', 'name')):
        raise ValueError('不是 make run 写下的笔记本记录：没有 edition 或 name')
    row['figures'] = row.get('figures') or {}
    if not isinstance(row['figures'], dict) or \
            not all(isinstance(f, dict) for f in row['figures'].values()):
        raise ValueError('figures 不是 {名字: 数字的记录} 的形式')
    return dict(row, record=path)


def load_rows(build):
    """Every notebook whose results are in ``build/run/``: {edition: [row, ...]} (:func:`_row`).
    SummaryError names a file that is not such a row."""
    rows = {}
    for path in sorted((Path(build) / 'run').glob('*/results/*.json')):
        try:
            row = _row(path)
        except (OSError, ValueError) as err:  # JSONDecodeError, UnicodeDecodeError: ValueErrors
            raise SummaryError(broken(build, err, path)) from err
        rows.setdefault(row['edition'], []).append(row)
    return dict(sorted(rows.items(), key=lambda kv: list(EDITIONS).index(kv[0])
                       if kv[0] in EDITIONS else len(EDITIONS)))


def load_history(build):
    """{(edition, name): [entry, ...]} from ``build/run/history.jsonl``, oldest first;
    a line that is not a run's (a run cut off while writing it) is skipped."""
    out = {}
    path = Path(build) / 'run' / HISTORY
    if path.exists():
        for line in path.read_text(encoding='utf-8').splitlines():
            try:
                entry = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(entry, dict) and isinstance(entry.get('figures'), dict):
                out.setdefault((entry.get('edition'), entry.get('name')), []).append(entry)
    return out
