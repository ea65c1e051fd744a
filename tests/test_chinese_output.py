"""The notebooks speak Chinese in their code too: code comments, the docstrings of the functions
and classes their code cells define, and the sentences our code prints.

What may stay English: identifiers and API terms, what libraries print (exceptions and their
tracebacks, warnings on stderr, nvidia-smi's table, reprs), and the log lines of the book's
API (``epoch 1, loss ...`` of its train function, ``time: 0.1 sec`` of ``Benchmark``). An
English sentence is a run of three or more English words with a word such as of/the/is
(:data:`GLUE`); a line of library output is one of :data:`LIBRARY`. A ``#@save`` definition
keeps its English docstring: it is the package's own code (tests/test_notebooks.py), and package
docstrings are English.
``python tests/test_chinese_output.py`` lists what the test counts.
"""
import ast
import json
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from d2lzh import project  # noqa: E402

NOTEBOOKS = [ROOT / p for e in ('mxnet', 'pytorch') for p in project.notebooks(e)]
IDS = [f'{p.parent.name}/{p.stem}' for p in NOTEBOOKS]
WORD = r"(?!(?:True|False|None)\b)[A-Za-z][a-z']+"
RUN = re.compile(rf'\b{WORD}(?:[ ,;:-]+{WORD}\b){{2,}}')
#: Words that make a run of English words a sentence rather than a row of names (a table's
#: header of identifiers: data cudnn_benchmark amp ...).
GLUE = re.compile(r'\b(the|a|an|of|to|in|is|are|was|were|be|for|on|with|and|or|not|by|from|'
                  r'after|before|per|each|than|at|as|it|its|this|that|here|there|has|have|'
                  r'can|cannot|will|only|all|every|then|when|into|out|did|does|do)\b', re.I)


def _has_sentence(text):
    """Whether ``text`` holds a run of three or more English words with one of :data:`GLUE`."""
    return any(GLUE.search(m.group()) for m in RUN.finditer(text))


LIBRARY = re.compile(
    r'^\s*(\w+(Error|Exception|Warning)\b|Traceback|File "|\||\+-|\[\d\d:\d\d:\d\d\]'
    r'|epoch \d+, loss|Stack trace|\d+: |warnings?\.warn)')
COMMENT = re.compile(r'(?:^|\s)#(?!@save)\s*(.*)$')


def english_lines(nb):
    """(cell number, line) of every stdout line our code printed that holds an English
    sentence, and of every code comment that does and holds no Chinese."""
    found = []
    code = [c for c in nb['cells'] if c['cell_type'] == 'code']
    for number, cell in enumerate(code, 1):
        for out in cell.get('outputs', []):
            if out.get('output_type') == 'error' or out.get('name') == 'stderr':
                continue
            text = out.get('text') or out.get('data', {}).get('text/plain', '')
            lines = ''.join(text).splitlines()
            library = False
            for line in lines:
                library = library or line.startswith('Traceback')
                if not library and not LIBRARY.match(line) and _has_sentence(_unquoted(line)):
                    found.append((number, line.strip()))
        for line in ''.join(cell['source']).splitlines():
            match = COMMENT.search(_unquoted(line))
            if match and _has_sentence(match.group(1)) and \
                    not re.search(r'[\u4e00-\u9fff]', match.group(1)):
                found.append((number, line.strip()))
    return found


def english_docstrings(nb):
    """(cell number, name) of every function or class a code cell defines whose docstring holds
    an English sentence (in any of its lines) and no Chinese; ``#@save`` definitions aside."""
    found = []
    code = [c for c in nb['cells'] if c['cell_type'] == 'code']
    for number, cell in enumerate(code, 1):
        lines = ['' if ln.lstrip().startswith(('%', '!')) else ln
                 for ln in ''.join(cell['source']).splitlines()]
        for node in ast.walk(ast.parse('\n'.join(lines))):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                continue
            doc = ast.get_docstring(node)
            if doc is None or '#@save' in lines[node.lineno - 1].replace(' ', '') or \
                    re.search(r'[\u4e00-\u9fff]', doc):
                continue
            if any(_has_sentence(_unquoted(line)) for line in doc.splitlines()):
                found.append((number, node.name))
    return found


def _unquoted(line):
    """The line without what is quoted in it ('...', "...", `...`), paths and dotted names, and
    what follows an exception's name (a library's message): names, not our sentences."""
    line = re.sub(r'\b[A-Z]\w*(Error|Exception|Warning|ForSymbol)\b[^:：]*[:：].*', '', line)
    line = re.sub(r"'[^']*'|\"[^\"]*\"|`[^`]*`", '', line)
    return re.sub(r'\S*[/.=_(]\S*', '', line)


@pytest.mark.parametrize('path', NOTEBOOKS, ids=IDS)
def test_no_english_sentences_in_our_comments_and_output(path):
    found = english_lines(json.loads(path.read_text(encoding='utf-8')))
    assert not found, '\n'.join(f'code cell {n}: {line[:120]}' for n, line in found)


@pytest.mark.parametrize('path', NOTEBOOKS, ids=IDS)
def test_no_english_docstrings_in_our_definitions(path):
    found = english_docstrings(json.loads(path.read_text(encoding='utf-8')))
    assert not found, '\n'.join(f'code cell {n}: {name}' for n, name in found)


def test_the_docstring_counter_finds_english_and_passes_the_rest():
    source = ('%matplotlib inline\n'
              'def english(x):\n    """Seconds per call, after one warm-up call."""\n'
              '    def inner():\n        \'\'\'The step of ``x``.\'\'\'\n\n\n'
              'class Chinese:\n    """每次调用的秒数（the time per call）。"""\n\n\n'
              'def names(x):\n    """``x``: data cudnn_benchmark amp."""\n\n\n'
              'def saved(x):  #@save\n    """Return the sum of the parts."""\n')
    nb = {'cells': [{'cell_type': 'markdown', 'source': 'The text of the book.'},
                    {'cell_type': 'code', 'source': source, 'outputs': []}]}
    assert english_docstrings(nb) == [(1, 'english'), (1, 'inner')]


def test_the_counter_finds_english_and_passes_library_output():
    nb = {'cells': [{'cell_type': 'code', 'source': '# load the data\nx = 1  # 数据\n', 'outputs': [
        {'output_type': 'stream', 'name': 'stdout', 'text':
         'the step changed the parameters: True\n最大绝对差：0.0 | 完全相同：True\n'
         'epoch 1, loss 2.3012, train acc 0.101, test acc 0.100, time 3.2 sec\n'
         "RuntimeError: Expected all tensors to be on the same device\n"
         "名字：'Workloads are queued'\n"}]}]}
    assert english_lines(nb) == [(1, 'the step changed the parameters: True'),
                                 (1, '# load the data')]


if __name__ == '__main__':
    total = total_docs = 0
    for path, name in zip(NOTEBOOKS, IDS):
        nb = json.loads(path.read_text(encoding='utf-8'))
        found = english_lines(nb)
        total += len(found)
        for number, line in found:
            print(f'{name} cell {number}: {line[:110]}')
        docs = english_docstrings(nb)
        total_docs += len(docs)
        for number, definition in docs:
            print(f'{name} cell {number}: docstring of {definition}')
    print(f'{total} English lines, {total_docs} English docstrings')
