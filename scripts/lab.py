"""The working copies that ``make lab`` opens, so that a student's edits never touch notebooks/.

``DEST/notebooks/...`` mirrors ``notebooks/`` (``pytorch/`` included); JupyterLab starts in
``DEST/notebooks``, so each kernel runs in its copy's folder and ``d2l.output_dir()`` is
``d2lzh-output`` there. A copy is made only where there is none: later calls keep a student's
copy, and say which stored notebooks changed since it was made. ``--reset`` starts the given
copies afresh from the stored notebooks; the copy it replaces goes to ``DEST/previous/...``.
The stored notebooks change only through git or a maintainer's copy of a run's notebooks.

    python scripts/lab.py [--dest build/lab] [--reset] [NOTEBOOK ...]
"""
import argparse
import hashlib
import json
import os
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from d2lzh import project  # noqa: E402

SOURCES = '.stored.json'  # in DEST: {path: sha256 of the stored notebook the copy was made from}


def _digest(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


def copy_notebooks(dest, notebooks=None, reset=False, root=ROOT):
    """Copy each notebook (repository-relative path; default: every one of both editions) from
    ``root`` to ``dest/<path>`` where there is no copy, or, with ``reset``, over the copy, which
    first moves to ``dest/previous/<path>`` (replacing an older one there).

    Returns:
        (copied, changed): the copies written, and the kept copies whose stored notebook
        changed since the copy was made (all as repository-relative paths).
    """
    dest = Path(dest)
    seen_path = dest / SOURCES
    seen = json.loads(seen_path.read_text()) if seen_path.is_file() else {}
    copied, changed = [], []
    for path in notebooks or project.notebooks('all'):
        source, copy = root / path, dest / path
        if copy.exists() and reset:
            (dest / 'previous' / path).parent.mkdir(parents=True, exist_ok=True)
            os.replace(copy, dest / 'previous' / path)
        if copy.exists():
            if seen.get(path, _digest(source)) != _digest(source):
                changed.append(path)
            continue
        copy.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, copy)  # a file of its own: never a link to the stored one
        seen[path] = _digest(source)
        copied.append(path)
    if copied:
        seen_path.write_text(json.dumps(seen, indent=1, sort_keys=True))
    return copied, changed


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('notebooks', nargs='*', help='repository-relative paths (default: all)')
    parser.add_argument('--dest', type=Path, default=ROOT / 'build' / 'lab')
    parser.add_argument('--reset', action='store_true',
                        help='start these copies afresh from the stored notebooks')
    args = parser.parse_args(argv)
    paths = args.notebooks or project.notebooks('all')
    kept = [p for p in paths if (args.dest / p).exists()]
    copied, changed = copy_notebooks(args.dest, paths, args.reset)
    lab = os.path.relpath(args.dest / 'notebooks')
    if args.reset:
        for path in copied:
            old = os.path.relpath(args.dest / 'previous' / path)
            print(f'{os.path.relpath(args.dest / path)}: started afresh from {path}'
                  + (f' (the copy it replaces: {old})' if path in kept else ''))
        return 0
    if copied:
        print(f'copied {len(copied)} notebook(s) to {lab}/: JupyterLab opens these working '
              'copies; notebooks/ keeps the stored ones')
    for path in changed:
        print(f'{path} changed since your copy was made: make lab-reset NOTEBOOKS={path} '
              'starts your copy afresh from it')
    return 0


if __name__ == '__main__':
    sys.exit(main())
