"""The stored notebooks: code shared with the package, hygiene, nbval's tags and cell names.

nbval (``pytest --nbval notebooks``) re-executes the notebooks and compares
outputs; these tests check what nbval does not. The runner behind ``make run`` is
tested in tests/test_run_notebooks.py.
"""
import ast
import inspect
import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import nbformat
import pytest

import d2lzh
from d2lzh import project

import nbval_tags

ROOT = Path(__file__).resolve().parent.parent
MXNET_NOTEBOOKS = [ROOT / path for path in project.notebooks('mxnet')]
TORCH_NOTEBOOKS = [ROOT / path for path in project.notebooks('pytorch')]
NOTEBOOKS = MXNET_NOTEBOOKS + TORCH_NOTEBOOKS
IDS = [f'{p.parent.name}/{p.stem}' for p in NOTEBOOKS]
MACHINE_PATH = re.compile(r'(/work/|/root/|/home/[a-z]|/tmp/[A-Za-z0-9_.-]+/|/Users/)')
NBVAL_COMMENT = re.compile(r'^\s*#\s*(NBVAL_|PYTEST_VALIDATE_)', re.M)


def _code_cells(nb):
    return [c for c in nb.cells if c.cell_type == 'code']


def _saved_definitions(nb):
    """(name, ast node) of every top-level def/class marked ``#@save``."""
    for cell in _code_cells(nb):
        source = '\n'.join(ln for ln in cell.source.splitlines()
                           if not ln.lstrip().startswith(('%', '!')))
        tree = ast.parse(source)
        lines = source.splitlines()
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and \
                    '#@save' in lines[node.lineno - 1].replace(' ', ''):
                yield node.name, node


def _load(path):
    return nbformat.read(path, as_version=4)


def test_the_registry_is_the_notebooks_folder():
    """d2lzh/project.py lists exactly the notebooks on disk, each edition in its folder,
    and a twin is the other edition's notebook of the same section, both ways."""
    found = (ROOT / 'notebooks').rglob('*.ipynb')
    on_disk = sorted(p.relative_to(ROOT).as_posix() for p in found
                     if '.ipynb_checkpoints' not in p.parts)
    listed = project.notebooks('all')
    assert sorted(listed) == on_disk, (
        f'not in d2lzh/project.py: {sorted(set(on_disk) - set(listed)) or "none"}; '
        f'listed but missing: {sorted(set(listed) - set(on_disk)) or "none"}')
    assert len(set(listed)) == len(listed)
    for nb in project.NOTEBOOKS:
        folder = 'notebooks/pytorch' if nb.edition == 'pytorch' else 'notebooks'
        assert nb.path.rsplit('/', 1)[0] == folder, nb
        assert project.find(nb.path) == nb and project.find(ROOT / nb.path) == nb
        if nb.twin is not None:
            twin = project.find(nb.twin)
            assert twin.edition != nb.edition and twin.twin == nb.path, nb
            assert twin.section == nb.section, nb


def _package_for(path):
    """The module whose code a notebook's #@save definitions must equal."""
    if project.find(path).edition == 'pytorch':
        pytest.importorskip('torch')
        from d2lzh import torch as d2l_torch
        return d2l_torch
    return d2lzh


@pytest.mark.parametrize('edition', ['mxnet', 'pytorch'])
def test_saved_functions_are_the_package_code(edition):
    """A function a notebook defines with #@save must be the package's own code."""
    found = set()
    for path in MXNET_NOTEBOOKS if edition == 'mxnet' else TORCH_NOTEBOOKS:
        package = _package_for(path)
        for name, node in _saved_definitions(_load(path)):
            obj = getattr(package, name)
            package_node = ast.parse(textwrap.dedent(inspect.getsource(obj))).body[0]
            assert ast.dump(node) == ast.dump(package_node), \
                f'{path.name}: {name} differs from {inspect.getsourcefile(obj)}'
            found.add(name)
    expected = {'split_and_load', 'allreduce', 'get_params'}
    if edition == 'mxnet':
        expected |= {'Benchmark', 'resnet18'}
    assert expected <= found


@pytest.mark.parametrize('path', NOTEBOOKS, ids=IDS)
def test_notebook_structure(path):
    nb = _load(path)
    first = nb.cells[0]
    assert first.cell_type == 'markdown' and first.source.startswith('# '), \
        'the first cell is the section title'
    exercises = [c.source.split('## 练习', 1)[1].strip() for c in nb.cells
                 if c.cell_type == 'markdown' and '## 练习' in c.source]
    assert exercises, 'every notebook ends with the exercises (## 练习)'
    # the book's exercises by number and gist in our own words, never quoted: a gist
    # ('大意如下'), ours marked beyond the book, or a heading of our own per exercise
    first = exercises[0].splitlines()[0]
    assert '大意' in first or '本书之外' in first or first.startswith('### 练习 1'), first
    # the generated setup cell (scripts/make_setup_cell.py, tests/test_packaging.py) aside
    sources = [c.source for c in _code_cells(nb) if '# d2lzh setup cell' not in c.source]
    d2l_at = next(i for i, s in enumerate(sources)
                  if 'import d2lzh' in s or 'from d2lzh import' in s)
    mx_at = [i for i, s in enumerate(sources) if re.search(r'^\s*(import|from) mxnet', s, re.M)]
    assert not mx_at or d2l_at <= min(mx_at), 'import d2lzh must come before import mxnet'
    cell = sources[d2l_at]
    if mx_at and d2l_at == min(mx_at):
        assert re.search(r'import d2lzh|from d2lzh import', cell).start() < \
            re.search(r'(import|from) mxnet', cell).start()
    assert 'setup_report()' in cell, 'the setup cell reports versions and devices'


@pytest.mark.parametrize('path', NOTEBOOKS, ids=IDS)
def test_stored_outputs_are_complete_and_clean(path):
    nb = _load(path)
    cells = _code_cells(nb)
    counts = [c.execution_count for c in cells]
    assert None not in counts and counts == sorted(counts), \
        'store outputs of one complete top-to-bottom run'
    has_png = False
    for c in cells:
        tags = c.metadata.get('tags', [])
        for out in c.outputs:
            text = json.dumps(out, ensure_ascii=False)
            assert not MACHINE_PATH.search(text), f'machine path in output: {c.source[:60]!r}'
            if out.output_type == 'error':
                assert 'raises-exception' in tags, f'stored error in {c.source[:60]!r}'
            if out.output_type == 'stream' and out.name == 'stderr':
                assert 'Warning' not in out.text, f'warning stored: {out.text[:200]}'
            has_png |= 'image/png' in out.get('data', {})
    if any('d2l.record(' in c.source for c in cells):
        assert has_png, 'a notebook that measures timings ends with a chart of them'


def _record_calls(nb):
    """Every ``d2l.record(...)`` (or ``results.record(...)``) call of the notebook."""
    for cell in _code_cells(nb):
        source = '\n'.join(ln for ln in cell.source.splitlines()
                           if not ln.lstrip().startswith(('%', '!')))
        for node in ast.walk(ast.parse(source)):
            func = getattr(node, 'func', None)
            if isinstance(node, ast.Call) and isinstance(func, ast.Attribute) and \
                    func.attr == 'record' and getattr(func.value, 'id', '') in ('d2l', 'results'):
                yield node


@pytest.mark.parametrize('path', NOTEBOOKS, ids=IDS)
def test_recorded_figures_say_what_they_are(path):
    """make run's summary takes a figure's words, what it was measured on and the
    notebook's headline from the notebook (d2l.record(..., what=..., headline=True)),
    never from the figure's key."""
    calls = list(_record_calls(_load(path)))
    no_words = [ast.unparse(c.args[0]) if c.args else '?' for c in calls
                if 'what' not in {k.arg for k in c.keywords}]
    assert not no_words, f'd2l.record without what=: {", ".join(no_words)}'
    headlines = [c for c in calls for k in c.keywords
                 if k.arg == 'headline' and getattr(k.value, 'value', True) is not False]
    assert not calls or len(headlines) == 1, \
        f'{len(headlines)} figures recorded with headline=True: mark the one the summary shows'


@pytest.mark.parametrize('path', NOTEBOOKS, ids=IDS)
def test_nbval_markers_are_cell_tags(path):
    """nbval's markers are cell tags, not comments in the code a student reads, and every tag
    is one nbval knows (it ignores a misspelt tag without a word)."""
    from nbval.plugin import metadata_tags
    for cell in _code_cells(_load(path)):
        where = f'cell {cell.source.lstrip()[:60]!r}'
        assert not NBVAL_COMMENT.search(cell.source), \
            f'{where}: an nbval comment; make it a tag (e.g. nbval-ignore-output)'
        tags = cell.metadata.get('tags', [])
        assert isinstance(tags, list) and all(isinstance(t, str) for t in tags), where
        unknown = sorted(set(tags) - set(metadata_tags) - set(nbval_tags.TAGS))
        assert not unknown, (f'{where}: tags {unknown} are none of nbval\'s '
                             f'{sorted(metadata_tags)} nor the project\'s {nbval_tags.TAGS}')
        assert 'nbval-raises-exception' not in tags, \
            f'{where}: tag raises-exception, which make run (nbclient) also honours'
    setup = _code_cells(_load(path))[0]
    assert '# d2lzh setup cell' in setup.source and \
        'nbval-ignore-output' in setup.metadata.get('tags', []), 'the setup cell is tagged'


MAX_CELL_LINES = 40  # a cell a student reads in one screen; plumbing goes into d2lzh


@pytest.mark.parametrize('path', NOTEBOOKS, ids=IDS)
def test_code_cells_fit_on_a_screen(path):
    """No code cell is longer than MAX_CELL_LINES lines (blank lines counted), the setup cell
    included: a longer one is split, or its plumbing moves into d2lzh."""
    long = [(len(c.source.splitlines()), c.source.lstrip().splitlines()[0][:60])
            for c in _code_cells(_load(path)) if len(c.source.splitlines()) > MAX_CELL_LINES]
    assert not long, f'code cells over {MAX_CELL_LINES} lines (lines, first line): {long}'


def test_no_module_over_400_lines():
    """d2lzh is a textbook's helper package: no module over 400 lines. (The single line count of
    the whole package is retired by issue 48: tests/test_architecture.py budgets each layer.)"""
    sizes = {p.relative_to(ROOT).as_posix(): len(p.read_text(encoding='utf-8').splitlines())
             for p in (ROOT / 'd2lzh').rglob('*.py')}
    assert not {k: v for k, v in sizes.items() if v > 400}


def test_make_setup_cell_writes_the_tag(tmp_path):
    """scripts/make_setup_cell.py tags the setup cell nbval-ignore-output: a new one, one that
    replaces an older setup cell, and a current one that lacks only the tag (nothing else in
    that notebook changes); a second run changes nothing."""
    sys.path.insert(0, str(ROOT / 'scripts'))
    try:
        import make_setup_cell
    finally:
        sys.path.pop(0)
    source = make_setup_cell.setup_cell_source()
    assert 'NBVAL' not in source
    code = nbformat.v4.new_code_cell('print(1)', execution_count=1)
    older = nbformat.v4.new_code_cell('# NBVAL_IGNORE_OUTPUT\n# d2lzh setup cell (old)\n',
                                      execution_count=1)
    untagged = nbformat.v4.new_code_cell(source, execution_count=1,
                                         metadata={'collapsed': False})
    for name, cells in [('new', [code]), ('older', [older, code]), ('untagged', [untagged])]:
        path = tmp_path / f'{name}.ipynb'
        nbformat.write(nbformat.v4.new_notebook(cells=cells), path)
        before = nbformat.read(path, as_version=4)
        path.write_text(make_setup_cell.update_notebook(path, source), encoding='utf-8')
        nb = nbformat.read(path, as_version=4)
        first = nb.cells[0]
        assert first.source == source and first.metadata['tags'] == ['nbval-ignore-output']
        if name == 'untagged':
            first.metadata.pop('tags')
            assert nb == before
        assert make_setup_cell.update_notebook(path, source) == path.read_text(encoding='utf-8')


def test_nbval_names_the_failing_cell_as_jupyter_does(tmp_path):
    """tests/conftest.py makes nbval's report name the cell as make run does; nbval reads the
    tags (a cell tagged nbval-ignore-output whose output differs passes)."""
    printed = [nbformat.v4.new_output('stream', name='stdout', text='3\n')]
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell('x = 1', execution_count=1),
        nbformat.v4.new_code_cell('print(x + 1)', execution_count=2, outputs=printed,
                                  metadata={'tags': ['nbval-check-output']}),
        nbformat.v4.new_code_cell('print(x)', execution_count=3, outputs=printed,
                                  metadata={'tags': ['nbval-ignore-output']})])
    nb.metadata['kernelspec'] = {'name': 'python3', 'display_name': 'Python 3',
                                 'language': 'python'}
    nbformat.write(nb, tmp_path / 'mismatch.ipynb')
    out = subprocess.run(
        [sys.executable, '-m', 'pytest', '--nbval', '--nbval-current-env', '-p', 'no:cacheprovider',
         'tests/test_packaging.py::test_unknown_attribute', str(tmp_path / 'mismatch.ipynb')],
        capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert out.returncode == 1, out.stdout + out.stderr
    assert 'mismatch.ipynb：单元格 [2] "print(x + 1)" 没有通过（nbval 的 Cell 1）' in out.stdout, \
        out.stdout
    assert '1 failed, 3 passed' in out.stdout, out.stdout


# Markdown never states what only a run knows: a figure it measured (a time, a rate, a speed-up,
# a memory increase, an accuracy), a direction (快了/慢了/更快/提高/下降 ... with a figure), what
# the stored outputs show, or the machine that ran it (在 2 核 CPU 上): the code prints them, so
# they change with the outputs. A sentence may quote a figure from a source it names: a DOCUMENT
# (docs/reference-figures.md, a bench JSON under bench/results/, the other edition's notebook,
# whose figures tests/test_book_coverage.py checks, a vendor's specification) or the BOOK, whose
# figure stands in the part of the sentence (between two ；) that names it; words of this run
# (THIS_RUN) or the run's machine make a figure the run's again. A `>` block is a quotation and
# names its source. Sentences that point at the output ("本次的倍数打印在上面") are welcome.
NUM = r'(?<![\w.^])\d+(?:[.,]\d+)*'
CLAUSE = re.compile(r'[，；（）()、]')
# numbers that are no figure of the run: exercise, step, section numbers; a sampling period
NOT_A_FIGURE = re.compile(r'(练习|第|图|笔记本|单元格) ?\d+|\d\.\d+ ?节|每 ?' + NUM + r' ?(毫秒|秒|ms|s)\b'
                          r'|(不是|并非)本次运行(测的|的数字)?|本次运行没有测')
THIS_RUN = re.compile(r'本次|这次运行|存储的(输出|运行)|下面的(输出|结果)|这台机器|输出(都)?来自'
                      r'|(上面|下面|这里|本节)(测得|测到|量到|实测)')
STORED_SHOWS = re.compile(r'存储的输出(里|中)')
MACHINE = re.compile(r'\d+ ?核(心)?的? ?(CPU|机器)|(\d+|一|两|四|八) ?块 ?(H100|H200|A100|V100|T4)')
BOOK = re.compile(r'书中|原书')
DOCUMENT = re.compile(r'reference-figures|bench/results/\S+\.json|基准运行|参考运行|(PyTorch|MXNet) 版的'
                      r'|规格|数据表|标称|标的是|转引自|Stack Overflow|issue \d+')  # the book never names a machine
IF = re.compile(r'若|如果')  # a sentence that says how to read an outcome, not which one
POINTER = re.compile(r'打印|见|看|由代码|是否|哪|多少|怎样|如何|几|能不能|能否')
OUTCOME = re.compile(NUM + r'|快|慢|高于|低于|超过|接近|达到|学会|一致|相反|成立|提高|下降|增加|减少|多占|停在'
                     r'|原因是|说明|表明|显示|True|False')
MEASURED = [
    re.compile(r'(快了|慢了|更快|更慢|提高|下降|加快|缩短|降低|加速(?!比))[^，；：（）、”]*?' + NUM),  # direction
    re.compile(NUM + r' ?(images/s|张/秒|样本/秒|[GT]B/s|GFLOP/s|TFLOPS)|每秒(只能)?(训练|处理)?\s*(约 )?'
               + NUM + ' ?张'),                                                              # a rate
    re.compile(r'(用了|用时|花了|耗时|只用|只要|需要|要|缩短到|降到)\s*(约|大约|仅|只有)?\s*' + NUM
               + r' ?(毫秒|微秒|秒|分钟|ms|μs|s)\b'),                                        # a time
    re.compile(r'(增加了?|多占了?|占了|峰值|涨到|增量)[^，；]{0,6}?' + NUM + r' ?[KMG]i?B\b'),   # memory
    re.compile(r'准确率[^，；。（）]{0,8}?(停在|为|是|达到了|只有|约|接近|降到|升到|仅)\s*'
               r'(0?\.\d+|\d+(\.\d+)? ?%|随机猜测)'),                                        # accuracy
]


def states_a_run_outcome(sentence, quote=False):
    """Whether a markdown ``sentence`` (a `>` block when ``quote``) states what only a run knows:
    the run's machine, a clause of this run (THIS_RUN) or of the stored outputs that states an
    outcome rather than points at the output (or says what an outcome would mean: 若/如果), or a
    measured figure or a direction with a figure (MEASURED) outside a quotation: a sentence naming
    a DOCUMENT, or the part of it (between two ；) that quotes the BOOK. A `>` block that names
    no source is no quotation."""
    s = NOT_A_FIGURE.sub('', sentence)
    if quote and not (BOOK.search(s) or DOCUMENT.search(s)):
        return True
    if MACHINE.search(s) and not DOCUMENT.search(s):
        return True
    if not IF.search(s) and any((STORED_SHOWS.search(c) or THIS_RUN.search(c) and OUTCOME.search(c))
                                and not POINTER.search(c) for c in CLAUSE.split(s)):
        return True
    return not DOCUMENT.search(s) and any(not BOOK.search(part) and rule.search(part)
                                          for part in s.split('；') for rule in MEASURED)


def _sentences(markdown):
    """(sentence, quote) of a markdown cell: every `>` block whole (quote True), and every other
    sentence, a line of a list or table ending one."""
    for paragraph in re.split(r'\n\s*\n', markdown):
        if paragraph.lstrip().startswith('>'):
            yield paragraph, True
            continue
        for sentence in re.split(r'(?<=[。！？])|\n', paragraph):
            if sentence.strip():
                yield sentence, False


STATES_A_RUN_OUTCOME = [
    '本次运行的测试准确率达到 0.91，比书中的高。',
    '下面的结果是在 2 块 H100 上得到的：两块 GPU 比一块快了 1.8 倍。',
    '> 两块 GPU 比一块快了 1.8 倍。',
    '> 异步循环明显更快。',
    '异步循环比同步循环快了 23%。',
    '在 2 核 CPU 上，一个迭代周期要 95 秒。',
    'hybridize() 之后每次调用只要 0.066 秒。',
    '只训练 1 个迭代周期，测试准确率停在 0.1 附近。',
    '测试准确率还接近随机猜测。',
    '两个设备每秒训练 5,400 张图像。',
    '不同步时峰值增加了 166 MB。',
    '存储的输出里 `y` 在 `cuda:0` 上。',
    '上面 2 个工作进程的这次运行训练了 30 步。',
    '书中的四次训练在 2 核 CPU 上几分钟就能跑完。',
    '这台机器上编译之后反而更慢。',
    '上面测得的原因是：一步的时间大半花在 Python 发出运算上。',
    '吞吐量提高到原来的 3.1 倍，见上面的输出。',
    '书中的初始值很小；只训练 1 个迭代周期，测试准确率就还停在 0.1 附近。',
]
STATES_NO_RUN_OUTCOME = [
    'GPU 的显存带宽约为 4.8 TB/s（NVIDIA 的规格）。',
    '一次复制要经过 PCIe。',
    '书中 1 块 GPU 每个迭代周期 13.0 秒，2 块 GPU 时缩短到 6.7 秒。',
    '本项目的参考运行在 H100 上测得 3.2 GB/s（见 docs/reference-figures.md）。',
    '> 书中：使用 2 块 GPU 时，每个迭代周期从 13.0 秒缩短到 6.7 秒。',
    'PyTorch 版的笔记本 05 在两块 H200 上测得快了 1.92 倍（范围 1.80–2.08）。',
    '本次的倍数打印在上面。',
    '本次运行落在哪种情形，看上面打印的加速比。',
    '后台线程每 2 毫秒读一次 RSS。',
    '每个批量是 512×1024 的 `float32`（2.1 MB），一共 100 个批量。',
    '6000×6000 的乘法计算量是 2000×2000 的 27 倍。',
    '批量越大，吞吐量越高，准确率却不一定提高。',
    '中位数至少比 1 大 10% 时才说“快了”。',
    '练习 1 量出了本次的三段时间。',
    '书中（MXNet）：2 块 GPU 时每个迭代周期从 13.0 秒缩短到 6.7 秒，快了 1.94 倍。',
    '若 (b) 与 (a) 相差无几，说明在这台机器上复制本来就没有拖慢训练。',
]


@pytest.mark.parametrize('text', STATES_A_RUN_OUTCOME + STATES_NO_RUN_OUTCOME, ids=[
    f'fails-{i}' for i in range(len(STATES_A_RUN_OUTCOME))] + [
    f'passes-{i}' for i in range(len(STATES_NO_RUN_OUTCOME))])
def test_the_markdown_rule_tells_a_run_outcome_from_teaching(text):
    """The rule flags every sentence of STATES_A_RUN_OUTCOME and none of STATES_NO_RUN_OUTCOME."""
    quote = text.startswith('>')
    assert states_a_run_outcome(text, quote) == (text in STATES_A_RUN_OUTCOME), text


@pytest.mark.parametrize('path', NOTEBOOKS, ids=IDS)
def test_markdown_states_nothing_only_a_run_knows(path):
    """No markdown sentence states what only a run knows (states_a_run_outcome): the code
    prints it, so it changes with the outputs; the markdown says what to look for."""
    found = [f'单元格 {i}：{s.strip()[:120]}' for i, c in enumerate(_load(path).cells)
             if c.cell_type == 'markdown'
             for s, quote in _sentences(c.source) if states_a_run_outcome(s, quote)]
    assert not found, 'markdown that only a run can know (print it from code, or say what ' \
        'to look for in the output):\n' + '\n'.join(found)
