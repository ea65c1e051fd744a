"""Store a run's outputs in the stored notebook: each code cell of ``notebooks/.../NAME.ipynb``
takes the outputs and execution count of the same cell of an executed copy (``make run``'s
``build/run/<edition>/NAME.ipynb``, or a GPU run's, docs/gpu-runs.md); everything else of the
stored notebook (its markdown, whose links the executed copy rewrote, its metadata) stays.

    python scripts/store_outputs.py EXECUTED.ipynb [EXECUTED.ipynb ...] [--into notebooks]

Each executed copy goes into the stored notebook of its name in its edition's folder under
``--into`` (``pytorch/`` for a copy from a folder named ``pytorch``). Exits with 2, changing
nothing, when a copy's code cells are not the stored notebook's (another version's run).
"""
import argparse
import sys
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent


def outputs_for(executed, stored):
    """The stored notebook ``stored`` (path) with the outputs of ``executed`` (path).
    ValueError: their code cells differ in number or source, or ``stored`` does not exist."""
    if not stored.exists():
        raise ValueError(f'{stored} 不存在：请给出某个已存储笔记本的运行副本')
    run, nb = nbformat.read(executed, as_version=4), nbformat.read(stored, as_version=4)
    ran = [c for c in run.cells if c.cell_type == 'code']
    cells = [c for c in nb.cells if c.cell_type == 'code']
    if [c.source for c in ran] != [c.source for c in cells]:
        raise ValueError(f'{executed} 运行的代码与 {stored} 的不同：请重新运行那个笔记本，'
                         '再存储它的输出')
    for cell, done in zip(cells, ran):
        cell.outputs, cell.execution_count = done.outputs, done.execution_count
    return nb


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('executed', nargs='+', type=Path)
    parser.add_argument('--into', type=Path, default=ROOT / 'notebooks')
    args = parser.parse_args(argv)
    pairs = [(path, args.into / ('pytorch' if path.parent.name == 'pytorch' else '') / path.name)
             for path in args.executed]
    try:  # every pair checked before any notebook is written
        notebooks = [(stored, outputs_for(executed, stored)) for executed, stored in pairs]
    except ValueError as err:
        print(f'错误：{err}', file=sys.stderr)
        return 2
    for (executed, _), (stored, nb) in zip(pairs, notebooks):
        nbformat.write(nb, stored)
        print(f'{stored}：存入了 {executed} 的输出')
    return 0


if __name__ == '__main__':
    sys.exit(main())
