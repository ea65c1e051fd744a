"""Where nbval compares each stored output: a table per notebook and a total per edition.

    python scripts/nbval_coverage.py [--check]

For every notebook of d2lzh/project.py, the code cells that have an output, split into:
compared on CI's CPU (``make test``), compared only in ``make test-gpu`` (cells tagged
``stored-machine`` of a notebook stored on GPUs, and cells tagged ``stored-data``, whose words
depend on the data the stored run trained on: make test-gpu runs the MXNet notebooks named to
it on the CPU with that data), and compared nowhere (tagged
``nbval-ignore-output``, each with the reason in its metadata ``d2lzh.ignore``), plus how many
of the compared cells have their numbers masked (tag ``measured``, tests/nbval_measured.cfg).
``--check`` exits 1 when an edition compares nowhere more than LIMIT of its output cells, an
ignored cell gives no reason, or an ignored cell prints a measurement (a number with a unit of
time, speed or size). tests/test_nbval_coverage.py runs it.
"""
import argparse
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / 'tests'))
from d2lzh import project  # noqa: E402  (no framework import: project.py is plain Python)
from nbval_tags import stored_gpus  # noqa: E402

LIMIT = 0.05  # at most 5 % of an edition's output cells compared nowhere
MEASUREMENT = re.compile(r'\d(?:\.\d+)?\s*(?:ms|us|sec|s\b|秒|毫秒|微秒|MB|GB|MiB|GiB|images/s|'
                         r'张/秒|倍|×|%)')


def output_text(cell):
    """Every text an output of ``cell`` holds (streams, text/plain, errors), joined."""
    parts = []
    for out in cell.get('outputs', []):
        parts.append(''.join(out.get('text', '')))
        parts.append(''.join(out.get('data', {}).get('text/plain', '')))
        parts.append(str(out.get('evalue', '')))
    return '\n'.join(parts)


def classify(path):
    """{'cpu': n, 'gpu': n, 'nowhere': [(cell number, reason, measures)], 'measured': n,
    'cells': n} for the notebook at ``path`` (relative to the repository root)."""
    nb = json.loads((ROOT / path).read_text(encoding='utf-8'))
    on_gpus = stored_gpus(nb['metadata']) > 0
    row = {'cells': 0, 'cpu': 0, 'gpu': 0, 'measured': 0, 'nowhere': []}
    code = [c for c in nb['cells'] if c['cell_type'] == 'code']
    for number, cell in enumerate(code, 1):
        if not cell.get('outputs'):
            continue
        row['cells'] += 1
        tags = cell['metadata'].get('tags', [])
        if 'nbval-ignore-output' in tags or 'nbval-skip' in tags:
            reason = cell['metadata'].get('d2lzh', {}).get('ignore', '')
            row['nowhere'].append((number, reason, bool(MEASUREMENT.search(output_text(cell)))))
            continue
        row['measured'] += 'measured' in tags
        later = 'stored-data' in tags or (on_gpus and 'stored-machine' in tags)
        row['gpu' if later else 'cpu'] += 1
    return row


def report(check=False):
    """Print the table; return the problems ``--check`` fails on (a list of str)."""
    problems = []
    print(f'{"notebook":48} {"with output":>11} {"CPU (CI)":>8} {"test-gpu":>8} '
          f'{"nowhere":>7} {"masked":>6}')
    for edition in project.EDITIONS:
        total = {'cells': 0, 'cpu': 0, 'gpu': 0, 'measured': 0, 'nowhere': 0}
        for path in project.notebooks(edition):
            row = classify(path)
            print(f'{path:48} {row["cells"]:11} {row["cpu"]:8} {row["gpu"]:8} '
                  f'{len(row["nowhere"]):7} {row["measured"]:6}')
            for number, reason, measures in row['nowhere']:
                print(f'    cell {number}: {reason or "(no reason given)"}')
                if not reason:
                    problems.append(f'{path}: code cell {number} is ignored without a reason')
                if measures:
                    problems.append(f'{path}: code cell {number} prints a measurement and is '
                                    'ignored whole: tag it measured instead')
            for key in total:
                total[key] += len(row[key]) if key == 'nowhere' else row[key]
        share = total['nowhere'] / max(total['cells'], 1)
        print(f'{edition + " edition":48} {total["cells"]:11} {total["cpu"]:8} {total["gpu"]:8} '
              f'{total["nowhere"]:7} {total["measured"]:6}   nowhere: {share:.1%}')
        if share > LIMIT:
            problems.append(f'{edition}: {share:.1%} of the output cells compared nowhere '
                            f'(at most {LIMIT:.0%})')
    for problem in problems:
        print('problem:', problem)
    return problems


if __name__ == '__main__':
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--check', action='store_true', help='exit 1 on a problem (see above)')
    args = parser.parse_args()
    sys.exit(1 if report() and args.check else 0)
