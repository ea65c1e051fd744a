"""The Makefile's check of its command line: variables, EDITION and NOTEBOOKS, in one line.

Runs under any Python 3.10+ (it loads ``d2lzh/project.py``, the notebook list, alone). Prints
``EDITION PATH ...``: the edition and the notebooks to take (repository-relative paths), or
``error: MESSAGE``, one line naming the fix, which the Makefile raises as make's error.

* ``--given``: the command-line variables; one that is not ours but a near miss of one of
  ``--known`` or of a ``D2LZH_*`` variable of d2lzh is an error naming the variable meant.
* ``--edition``: mxnet, pytorch or all, when given; else it follows the notebooks.
* ``--notebooks``: when given, each a path (``notebooks/02_hybridize.ipynb``), a path without
  ``.ipynb``, ``pytorch/NAME`` or a bare ``NAME`` (of EDITION's edition, the MXNet one first
  when both have it); a near miss is an error with the notebook meant. Without it: EDITION's.

    python scripts/make_args.py --known NAME... [--given NAME...] [--edition E] [--notebooks NB...]
"""
import argparse
import difflib
import importlib.util
import os
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def load_project():
    """The module ``d2lzh/project.py``, loaded without importing the package."""
    spec = importlib.util.spec_from_file_location('d2lzh_project', ROOT / 'd2lzh' / 'project.py')
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


PROJECT = load_project()
EDITIONS = PROJECT.EDITIONS  # {edition: (label, folder)}
NOTEBOOKS_DIR = os.path.commonprefix([ed.folder for ed in EDITIONS.values()])  # notebooks/


def environment_names():
    """The ``D2LZH_*`` environment variables that d2lzh's sources name."""
    return {name for path in (ROOT / 'd2lzh').rglob('*.py')
            for name in re.findall(r'\bD2LZH_[A-Z0-9_]+', path.read_text(encoding='utf-8'))}


def near_miss(given, known):
    """The error for the first of ``given`` (variable names) that is not in ``known`` but
    equals one of them but for case, or is close to one (difflib ratio >= 0.8); else None."""
    upper = {name.upper(): name for name in sorted(known)}
    for name in given:
        close = difflib.get_close_matches(name.upper(), upper, n=1, cutoff=0.8)
        if name not in known and close:
            return f'{name} 不是这个 Makefile 的变量：你是不是想用 {upper[close[0]]}？'
    return None


def split(arg):
    """``(edition, name)`` of a notebook argument: the edition its folder names (None for a
    bare name) and its name without folder and ``.ipynb``."""
    path = os.path.normpath(arg.replace('\\', '/')).replace(os.sep, '/')
    if os.path.isabs(path):
        path = os.path.relpath(path, ROOT).replace(os.sep, '/')
    path = path.removesuffix('.ipynb')
    prefixes = [(p, e) for e, ed in EDITIONS.items()
                for p in (ed.folder, ed.folder.removeprefix(NOTEBOOKS_DIR)) if p]
    for prefix, edition in sorted(prefixes, key=lambda pe: -len(pe[0])):
        if path.startswith(prefix):
            return edition, path[len(prefix):]
    return None, path


def resolve(arg, edition, names):
    """The paths ``arg`` names under EDITION=``edition`` (None: not given): one, or both
    editions' for a bare name under EDITION=all. ``names``: ``{edition: [name, ...]}``.

    Raises:
        ValueError: no such notebook (one line: the notebook meant, or the valid names).
    """
    folder, name = split(arg)
    wanted = list(EDITIONS) if edition in (None, 'all') else [edition]
    editions = list(dict.fromkeys([folder] if folder else [*wanted, *EDITIONS]))
    found = [EDITIONS[e].folder + name + '.ipynb' for e in editions if name in names[e]]
    if found:
        return found if edition == 'all' and not folder else found[:1]
    pool = [(e, n) for e in dict.fromkeys([*editions, *EDITIONS]) for n in names[e]]
    close = difflib.get_close_matches(name, [n for _, n in pool], n=1, cutoff=0.6)
    if close:
        e = next(e for e, n in pool if n == close[0])
        raise ValueError(f'NOTEBOOKS：{arg} 不是本项目的笔记本：你是不是想用 '
                         f'{EDITIONS[e].folder}{close[0]}.ipynb？')
    valid = [EDITIONS[e].folder.removeprefix(NOTEBOOKS_DIR) + n for e in wanted for n in names[e]]
    raise ValueError(f'NOTEBOOKS：{arg} 不是本项目的笔记本；可用的笔记本：{" ".join(valid)}')


def choose(edition, notebooks):
    """``(edition, paths)`` from EDITION and NOTEBOOKS as given (None: not given).

    Raises:
        ValueError: a bad EDITION, a bad notebook or one of the other edition (one line).
    """
    if edition is not None and edition not in (*EDITIONS, 'all'):
        each = '、'.join(f'EDITION={e}（{ed.folder}*.ipynb）' for e, ed in EDITIONS.items())
        raise ValueError(f'EDITION={edition} 无效：请用 {each}或 EDITION=all（两个版本）')
    if notebooks is None:
        return edition or 'mxnet', PROJECT.notebooks(edition or 'mxnet')
    names = {e: [Path(p).stem for p in PROJECT.notebooks(e)] for e in EDITIONS}
    paths = list(dict.fromkeys(p for arg in notebooks for p in resolve(arg, edition, names)))
    editions = {PROJECT.find(p).edition for p in paths}
    if edition is None:
        return (editions.pop() if len(editions) == 1 else 'all' if editions else 'mxnet'), paths
    for path in paths:
        other = PROJECT.find(path).edition
        if edition not in ('all', other):
            raise ValueError(f'NOTEBOOKS：{path} 属于 {EDITIONS[other].label} 版，但 '
                             f'EDITION={edition}：请用 EDITION={other} 或 EDITION=all')
    return edition, paths


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--known', nargs='*', default=[])
    parser.add_argument('--given', nargs='*', default=[])
    parser.add_argument('--edition')
    parser.add_argument('--notebooks', nargs='*')
    args = parser.parse_args(argv)
    error = near_miss(args.given, set(args.known) | environment_names())
    try:
        if error is None:
            edition, paths = choose(args.edition, args.notebooks)
    except ValueError as err:
        error = str(err)
    print(f'error: {error}' if error else ' '.join([edition, *paths]))
    return 0


if __name__ == '__main__':
    sys.exit(main())
