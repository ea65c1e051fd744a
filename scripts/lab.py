"""The working copies that ``make lab`` opens, so that a student's edits never touch notebooks/.

``DEST/notebooks/...`` mirrors ``notebooks/`` (``pytorch/`` included); JupyterLab starts in
``DEST/notebooks``, so each kernel runs in its copy's folder and ``d2l.output_dir()`` is
``d2lzh-output`` there. A copy is made only where there is none: later calls keep a student's
copy, and say which stored notebooks changed since it was made. ``--reset`` starts the given
copies afresh from the stored notebooks; each copy it replaces is kept, numbered and never
overwritten, as ``DEST/previous/notebooks/NAME.1.ipynb``, ``NAME.2.ipynb``, ...
The stored notebooks change only through git or a maintainer's copy of a run's notebooks.

JupyterLab serves nothing outside ``DEST/notebooks``, so the files outside notebooks/ that the
notebooks' markdown links to (``../docs/...``, ``../d2lzh/...``) are copied, afresh on every
call, to ``DEST/notebooks/linked/<repository path>``, and the copies' links point there.

    python scripts/lab.py [--dest build/lab] [--reset] [NOTEBOOK ...]
"""
import argparse
import hashlib
import json
import os
import posixpath
import re
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from d2lzh import project  # noqa: E402

SOURCES = '.stored.json'  # in DEST: {path: sha256 of the stored notebook the copy was made from}
PREVIOUS = 'previous'     # in DEST: the copies that --reset replaced
LINKED = 'notebooks/linked'  # in DEST: the files outside notebooks/ the notebooks link to
LINK = re.compile(r'(\]\()([^)\s#?]+)')  # a markdown link's target: [text](target#anchor)


def _digest(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


def relink_markdown(nb, folder, new_target):
    """Rewrite, in place, the relative links of the markdown cells of notebook ``nb`` (a dict)
    whose source is in ``folder``: a link to an existing file, ``file`` (absolute, normalised,
    not resolved), becomes ``new_target(file)``, or stays as it is where that is None. URLs,
    absolute paths, anchors (``#...``, kept after a new target) and missing files stay.
    Used for the lab's copies (:func:`lab_copy`) and ``make run``'s executed ones.

    Returns:
        the files whose links were rewritten, sorted, each once.
    """
    folder, changed = Path(os.path.abspath(folder)), set()

    def relink(m):
        if re.match(r'[A-Za-z][\w+.-]*:|/', m[2]):
            return m[0]
        file = Path(os.path.normpath(folder / m[2]))
        new = new_target(file) if file.is_file() else None
        if new is None:
            return m[0]
        changed.add(file)
        return m[1] + new

    for cell in nb.get('cells', []):
        if cell.get('cell_type') == 'markdown':
            source = cell['source']
            cell['source'] = (LINK.sub(relink, source) if isinstance(source, str)
                              else [LINK.sub(relink, line) for line in source])
    return sorted(changed)


def lab_copy(path, root=ROOT):
    """The lab copy of notebook ``path``: (its text, the repository paths it links to outside
    notebooks/). Those links point at ``LINKED/<path>``; without such links the text is the
    stored notebook's, byte for byte."""
    root = Path(os.path.abspath(root))
    text = (root / path).read_bytes().decode('utf-8')
    nb = json.loads(text)

    def outside(file):  # a file of root outside notebooks/: its copy in LINKED
        if not file.is_relative_to(root) or file.is_relative_to(root / 'notebooks'):
            return None
        linked = file.relative_to(root).as_posix()
        return posixpath.relpath(f'{LINKED}/{linked}', posixpath.dirname(path))

    linked = relink_markdown(nb, (root / path).parent, outside)
    if linked:
        text = json.dumps(nb, indent=1, ensure_ascii=False) + '\n'  # nbformat's layout
    return text, sorted(file.relative_to(root).as_posix() for file in linked)


def _keep_previous(dest, path):
    """Move the copy ``dest/path`` to ``dest/previous/<path>`` numbered one above the earlier
    ones there (``NAME.1.ipynb``, ``NAME.2.ipynb``, ...), overwriting none; return the new path."""
    copy = dest / path
    folder = (dest / PREVIOUS / path).parent
    folder.mkdir(parents=True, exist_ok=True)
    numbered = re.compile(re.escape(copy.stem) + r'\.(\d+)' + re.escape(copy.suffix))
    n = 1 + max((int(m[1]) for f in folder.iterdir() if (m := numbered.fullmatch(f.name))),
                default=0)
    kept = folder / f'{copy.stem}.{n}{copy.suffix}'
    os.rename(copy, kept)
    return kept


def copy_notebooks(dest, notebooks=None, reset=False, root=ROOT):
    """Copy each notebook (repository-relative path; default: every one of both editions) from
    ``root`` to ``dest/<path>`` (:func:`lab_copy`) where there is no copy, or, with ``reset``,
    over the copy, which first moves to ``dest/previous/`` (:func:`_keep_previous`). The
    files the notebooks link to outside notebooks/ are copied afresh to ``dest/LINKED/``.

    Returns:
        (copied, changed, previous): the copies written, the kept copies whose stored notebook
        changed since the copy was made (all as repository-relative paths), and
        {path: where its replaced copy went} for the copies that ``reset`` replaced.
    """
    dest = Path(dest)
    seen_path = dest / SOURCES
    seen = json.loads(seen_path.read_text()) if seen_path.is_file() else {}
    copied, changed, previous = [], [], {}
    for path in notebooks or project.notebooks('all'):
        source, copy = root / path, dest / path
        text, linked = lab_copy(path, root)
        for outside in linked:
            (dest / LINKED / outside).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(root / outside, dest / LINKED / outside)
        if copy.exists() and reset:
            previous[path] = _keep_previous(dest, path)
        if copy.exists():
            if seen.get(path, _digest(source)) != _digest(source):
                changed.append(path)
            continue
        copy.parent.mkdir(parents=True, exist_ok=True)
        copy.write_bytes(text.encode('utf-8'))  # a file of its own: never a link to the stored one
        seen[path] = _digest(source)
        copied.append(path)
    if copied:
        seen_path.write_text(json.dumps(seen, indent=1, sort_keys=True))
    return copied, changed, previous


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('notebooks', nargs='*', help='repository-relative paths (default: all)')
    parser.add_argument('--dest', type=Path, default=ROOT / 'build' / 'lab')
    parser.add_argument('--reset', action='store_true',
                        help='start these copies afresh from the stored notebooks')
    args = parser.parse_args(argv)
    copied, changed, previous = copy_notebooks(args.dest, args.notebooks, args.reset)
    if args.reset:
        for path in copied:
            print(f'{os.path.relpath(args.dest / path)}：已从 {path} 重新复制'
                  + (f'；你原来的副本保存在 {os.path.relpath(previous[path])}'
                     '（之前的副本都还在，不会被覆盖）' if path in previous else ''))
        return 0
    if copied:
        print(f'已把 {len(copied)} 个笔记本复制到 {os.path.relpath(args.dest / "notebooks")}/：'
              'JupyterLab 打开的是这些工作副本，notebooks/ 里存储的笔记本不会改变')
    for path in changed:
        print(f'{path} 在你的副本做好之后有了新版本：make lab-reset NOTEBOOKS={path} '
              f'会从新版本重新开始（你的副本会保存到 {os.path.relpath(args.dest / PREVIOUS)}/）')
    return 0


if __name__ == '__main__':
    sys.exit(main())
