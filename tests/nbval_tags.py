"""nbval's items, by the repository's conftest.py: a failing cell is named as Jupyter and
``make run`` name it, and the project's two cell tags beside nbval's own take effect.

* ``measured``: the cell prints what a run measures. Its outputs are compared after the rules
  of ``tests/nbval_measured.cfg`` (numbers and GPU names masked) on top of nbval's sanitizer,
  so its words, verdicts and layout are compared and its figures are not.
* ``stored-machine``: the layout of the output depends on the machine (a branch for "no GPU",
  a line per GPU). It is compared only on a machine with as many GPUs as the one that stored
  the notebook (the notebook's metadata ``d2lzh.stored_gpus``, 0 when absent): on CI's CPU for
  the MXNet edition, in ``make test-gpu`` (scripts/gpu_check.py) for PyTorch notebooks stored
  on GPUs.

* ``stored-data``: the words depend on how much of Fashion-MNIST the run trains on (a loss
  that leaves its plateau, an accuracy past a threshold). Compared only where
  ``$D2LZH_MAX_EXAMPLES`` is unset, as when the notebook was stored: not in ``make test`` (a
  128-image subset), in ``make test-gpu`` (which also runs MXNet notebooks named to it, on
  the CPU).

``nbval-ignore-output`` (nbval's) stays for output compared nowhere; such a cell names its
reason in its metadata ``d2lzh.ignore`` (scripts/nbval_coverage.py prints them).
"""
import configparser
import functools
import os
import re
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

MEASURED_RULES = Path(__file__).resolve().parent / 'nbval_measured.cfg'
TAGS = ('measured', 'stored-machine', 'stored-data')


@functools.lru_cache(maxsize=None)
def measured_rules(path=MEASURED_RULES):
    """[(name, compiled regex, replacement)] of a sanitize file (default
    tests/nbval_measured.cfg), in file order; read once per file."""
    parser = configparser.ConfigParser(interpolation=None)  # a regex may hold '%'
    parser.read(path, encoding='utf-8')
    def unquoted(value):  # configparser strips spaces: a value in quotes keeps them
        return value[1:-1] if len(value) > 1 and value[0] == value[-1] == "'" else value

    return [(name, re.compile(parser[name]['regex']), unquoted(parser[name]['replace']))
            for name in parser.sections()]


def mask(text, rules=None):
    """``text`` with every rule of tests/nbval_measured.cfg applied, in order."""
    for _, regex, replace in rules if rules is not None else measured_rules():
        text = regex.sub(replace, text)
    return text


def present_gpus():
    """How many NVIDIA GPUs a notebook run here sees: CUDA_VISIBLE_DEVICES's entries where it
    is set, else the lines of ``nvidia-smi -L``; 0 without a driver."""
    visible = os.environ.get('CUDA_VISIBLE_DEVICES')
    if visible is not None:
        return len([d for d in visible.split(',') if d.strip() and d.strip() != '-1'])
    if not shutil.which('nvidia-smi'):
        return 0
    try:
        out = subprocess.run(['nvidia-smi', '-L'], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return 0
    return sum(line.startswith('GPU ') for line in out.stdout.splitlines())


def stored_gpus(metadata):
    """The GPUs of the machine that stored a notebook, from its ``metadata`` (0: a CPU)."""
    return int(metadata.get('d2lzh', {}).get('stored_gpus', 0))


def quiet(source):
    """Whether IPython hides the value of a cell with this ``source``: its last token, comments
    and blank lines aside, is ';' (a trailing comment does not make it show)."""
    import io
    import tokenize
    skip = (tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.ENDMARKER)
    try:
        tokens = [t for t in tokenize.generate_tokens(io.StringIO(source).readline)
                  if t.type not in skip]
    except (tokenize.TokenError, SyntaxError, IndentationError):  # e.g. a `!` shell line
        return source.rstrip().endswith(';')
    return bool(tokens) and tokens[-1].string == ';'


def apply(item, gpus):
    """Give nbval's cell ``item`` the meaning of the project's tags on a machine with
    ``gpus`` GPUs."""
    tags = item.cell.metadata.get('tags', [])
    if 'measured' in tags:
        rules, base = measured_rules(), item.sanitize
        item.sanitize = lambda s, rules=rules, base=base: (
            mask(base(s), rules) if isinstance(s, str) else base(s))
    if 'stored-machine' in tags and stored_gpus(item.parent.nb.metadata) != gpus:
        item.options['check'] = False
    if 'stored-data' in tags and os.environ.get('D2LZH_MAX_EXAMPLES', '').strip():
        item.options['check'] = False
    if quiet(item.cell.source):
        # IPython hides the value of a cell ending in ';' by reading the cell from its history;
        # nbval executes with store_history=False, so the value shows: drop it, as Jupyter does.
        compare = item.compare_outputs
        item.compare_outputs = lambda test, ref, *args, compare=compare: compare(
            [o for o in test if o.get('output_type') != 'execute_result'], ref, *args)


# nbval names a failing cell "Cell 3" (its index among the code cells); make run and
# Jupyter name it by its execution count. Give nbval's report the same name as
# make run: `单元格 [4] "first line of its source"` (scripts/run_notebooks.py:cell_label).
def _cell_labeller():
    import importlib.util
    spec = importlib.util.spec_from_file_location(
        '_run_notebooks', ROOT / 'scripts' / 'run_notebooks.py')
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.cell_label


def pytest_collection_modifyitems(items):
    nb_items = [i for i in items if type(i).__name__ == 'IPyNbCell' and hasattr(i, 'cell')]
    if not nb_items:
        return
    cell_label = _cell_labeller()
    machine = present_gpus()
    for item in nb_items:
        apply(item, machine)
        label = cell_label(item.cell)
        item.reportinfo = (lambda item=item, text=f'{item.nodeid} = {label}':
                           (item.fspath, 0, text))
        original = item.repr_failure

        def repr_failure(excinfo, original=original, label=label, item=item):
            text = str(original(excinfo))
            return (f'{item.fspath.basename}：{label} 没有通过'
                    f'（nbval 的 Cell {item.cell_num}）\n' + text)
        item.repr_failure = repr_failure
