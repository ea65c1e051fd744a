"""make run's summary (scripts/run_summary.py) on a recorded run: the MXNet edition on a 2-core
machine without a GPU (tests/data/make-run-mxnet-2cores.json, the layout run_notebooks.py writes).

The console starts with what the machine can and cannot show, then one takeaway per section in
Chinese, then the table; a range covering 1x is 测不出差别; numbers follow one rule; the chart
holds only speed-ups; a reason the notebook did not measure is never beside a number.
"""
import json
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / 'scripts'))
import run_summary  # noqa: E402
from run_notebooks import read_figures  # noqa: E402

RECORDED = ROOT / 'tests' / 'data' / 'make-run-mxnet-2cores.json'
SECTIONS = ['4.6 GPU计算', '8.1 命令式和符号式混合编程', '8.2 异步计算', '8.3 自动并行计算',
            '8.4 多GPU计算', '8.5 多GPU计算的简洁实现', '多机训练']
ENGLISH = re.compile(r'\b(edition|measurable|difference|machine|first \d+ of|runs?)\b')


def _layout(build, stored_run):
    """Write a recorded run where scripts/run_notebooks.py writes it under ``build``."""
    for row in stored_run['rows']:
        path = build / 'run' / row['edition'] / 'results' / f"{row['name']}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(row, ensure_ascii=False), encoding='utf-8')
    (build / 'run' / run_summary.HISTORY).write_text(
        ''.join(json.dumps(h, ensure_ascii=False) + '\n' for h in stored_run['history']),
        encoding='utf-8')


@pytest.fixture()
def recorded(tmp_path, monkeypatch):
    """The recorded run summarised into ``tmp_path/build/run``: (console lines, summary.md,
    the items handed to the chart)."""
    _layout(tmp_path / 'build', json.loads(RECORDED.read_text(encoding='utf-8')))
    charted = []
    monkeypatch.setattr(run_summary, 'draw_chart', lambda items, path: (
        charted.extend(items), Path(path).write_bytes(b'\x89PNG')))
    rows, history = run_summary.write_summary(
        tmp_path / 'build', lambda text, dest: dest.write_text(text, encoding='utf-8'))
    text = (tmp_path / 'build' / 'run' / 'summary.md').read_text(encoding='utf-8')
    return run_summary.summary_lines(rows, history), text, charted


def test_console_starts_with_what_the_machine_can_show_then_one_takeaway_per_section(recorded):
    lines = recorded[0]
    assert lines[0] == 'MXNet 版（notebooks/）：2 个 CPU 核心，没有 MXNet 能用的 GPU'
    assert lines[1] == '这台机器能展示什么、不能展示什么：'
    takeaways = lines.index('每节的结论：')
    notes = lines[2:takeaways]
    assert notes[0].startswith('  - 能展示：') and notes[1].startswith('  - 不能展示：')
    assert 'cpu(0) 和 cpu(1)' in notes[1] and '同一组 CPU 核心' in notes[1]
    assert any('前 512 或 4096 张' in n for n in notes)
    table = lines.index('每个笔记本的用时和主要结果：')
    assert table == takeaways + len(SECTIONS) + 1  # the takeaways, then the table
    for section, line in zip(SECTIONS, lines[takeaways + 1:table]):
        assert line.startswith(f'  {section}：') and line.endswith('。'), line
    assert len(lines) == table + 1 + len(SECTIONS)
    for line in lines:
        assert not ENGLISH.search(line), line
        assert re.search(r'[\u4e00-\u9fff]', line), line


def test_takeaways_claim_only_what_was_measured(recorded):
    lines = recorded[0]
    take = {s: next(ln for ln in lines if ln.startswith(f'  {s}：')) for s in SECTIONS}
    assert '测不出明显差别（0.99×，范围 0.96×–1.01×）' in take['4.6 GPU计算']
    assert '内存池' not in take['4.6 GPU计算']  # a reason 4.6 did not measure
    assert '快了 2.95×（范围 2.54×–3.37×）' in take['8.1 命令式和符号式混合编程']
    assert '测不出明显差别（1.10×，范围 1.05×–1.19×）' in take['8.2 异步计算']  # under 10 %
    assert 'cpu(0) 与 cpu(1) 同时计算比分开计算：快了 1.13×' in take['8.3 自动并行计算']
    assert '测不出明显差别（0.92×，范围 0.91×–0.93×）' in take['8.4 多GPU计算']
    assert '条件：2 个设备 = 同一组 CPU 核心' in take['8.4 多GPU计算']
    assert '测不出明显差别（0.95×' in take['8.5 多GPU计算的简洁实现']
    assert '的用时：4.89 ms' in take['多机训练']


def test_summary_md_in_the_same_order_and_in_chinese(recorded):
    text = recorded[1]
    order = ['# make run 的结果汇总', '### 这台机器能展示什么、不能展示什么', '### 每节的结论',
             '## 各节的加速比', '## MXNet 版：每个笔记本', '| 笔记本 | 数字 | 数值 | 测量条件 |']
    assert [text.index(h) for h in order] == sorted(text.index(h) for h in order)
    assert '](summary.png)' in text
    stored_run = json.loads(RECORDED.read_text(encoding='utf-8'))
    assert len(re.findall(r'^\| 0\d_', text, re.M)) == \
        sum(len(r['figures']) for r in stored_run['rows']) == 54  # every figure recorded
    assert not re.search(r'\b(What this machine|no measurable difference|edition)\b', text)


def test_a_range_covering_1x_is_never_faster_or_slower():
    row = {'edition': 'mxnet', 'name': '01_use-gpu', 'title': '4.6 GPU计算', 'status': 'ok',
           'seconds': 14.0, 'figures': {}}
    pool = ['cpu(1)：CPU 上下文代替 GPU', 'CPU 版 MXNet 没有内存池']
    cases = [(1.0, (0.975, 1.02), '测不出明显差别（1.00×，范围 0.97×–1.02×）'),
             (1.05, (1.02, 1.08), '测不出明显差别（1.05×，范围 1.02×–1.08×）'),  # under 10 %
             (1.78, (1.25, 5.63), '快了 1.78×（范围 1.25×–5.63×）'),
             (0.8, (0.5, 0.99), '反而慢了，只有原来速度的 0.80×（范围 0.50×–0.99×）'),
             (1.2, None, '1.20×（没有记录重复的范围，不判断快慢）')]
    for value, spread, words in cases:
        fig = {'value': value, 'unit': 'x', 'spread': spread, 'tags': pool, 'headline': True,
               'what': '新进程中第二次复制（到新数组）相对第一次分配＋复制的加速比'}
        text = run_summary.takeaway(dict(row, figures={'second_copy_speedup': fig}))
        assert text == f'4.6 GPU计算：{run_summary.QUESTIONS["4.6"]}新进程中第二次复制（到新数组）相对第一次分配＋复制：{words}' \
            '；条件：cpu(1)：CPU 上下文代替 GPU。'  # no 内存池: a reason 4.6 did not measure
    fig = {'value': 1.0, 'unit': 'x', 'spread': (0.975, 1.02)}
    assert run_summary.value_text('k', fig) == '1.00×（0.97×–1.02×，测不出明显差别）'
    # a headline the notebook reports without a verdict (kind 'ratio') gets none here either
    fig = {'value': 1.16, 'unit': 'x', 'spread': (1.12, 1.73), 'kind': 'ratio', 'headline': True,
           'what': '只在最后同步相对每次都同步的加速比'}
    text = run_summary.takeaway(dict(row, figures={'async_speedup_book': fig}))
    assert '比值 1.16×（范围 1.12×–1.73×；本节只报比值，不判断快慢）' in text and '快了' not in text


def test_numbers_follow_one_rule(recorded):
    fmt = run_summary.format_value
    assert [fmt(1, 'x'), fmt(3, 'x'), fmt(0.994, 'x'), fmt(244.4, 'x', 'ratio')] == \
        ['1.00×', '3.00×', '0.99×', '244.40×']
    assert [fmt(41.234, 'ms'), fmt(1227.75, 'ms'), fmt(0.0011, 's'), fmt(35.93, 'images/s'),
            fmt(0.0, 'MB'), fmt(12, 'kernels')] == \
        ['41.2 ms', '1228 ms', '0.00110 s', '35.9 张/秒', '0 MB', '12 个核函数']
    lines, text, _ = recorded
    for line in lines + text.splitlines():
        assert not re.search(r'\d(x\b|倍)', line), line  # speed-ups end in ×, never x
        for number in re.findall(r'(?<![\d×])[\d.]+×(?!\d)', line.replace('包含 1×', '')):
            assert re.fullmatch(r'\d+\.\d\d\d{0,2}×', number), (number, line)
    row = next(ln for ln in text.splitlines() if '`gluon_resnet18_test_acc_1dev`' in ln)
    assert '| 0.08（接近随机猜测的 0.10）（只用了前 512 张训练图像） |' in row
    row = next(ln for ln in text.splitlines() if '`test_acc_2dev_batch512_lr0.4`' in ln)
    assert '| 0.10（接近随机猜测的 0.10） |' in row  # all 60000 images: no subset
    row = next(ln for ln in text.splitlines() if '`gluon_narrow_test_acc_2dev`' in ln)
    assert '| 0.78（只用了前 4096 张训练图像） |' in row


def test_chart_holds_one_headline_speedup_per_section(recorded, tmp_path):
    charted = recorded[2]
    keys = [it['key'].split(': ')[1] for it in charted]
    stored_run = json.loads(RECORDED.read_text(encoding='utf-8'))
    heads = [k for r in stored_run['rows'] for k, f in r['figures'].items()
             if f['unit'] == 'x' and f.get('headline') and k != 'matmul_flop_rate_ratio']
    assert keys == heads and len(keys) == 6  # 7 sections; 多机训练's headline is a time
    assert [it['verdict'] for it in charted][:3] == ['same', 'faster', 'same']
    # the conditions that change a row's reading are in its label
    assert charted[4]['label'].endswith('（2 个设备 = 同一组 CPU 核心）'), charted[4]['label']
    # a headline ratio (kind='ratio': reported without a verdict) is charted in its own colour,
    # a ratio that is not a headline stays out; the chart is drawn
    figures = {'flops': {'value': 9.0, 'unit': 'x', 'kind': 'ratio', 'spread': [8.0, 10.0]},
               'speed': {'value': 2.0, 'unit': 'x', 'kind': 'speedup', 'spread': [1.5, 2.5]},
               'async': {'value': 1.2, 'unit': 'x', 'kind': 'ratio', 'spread': [1.15, 1.3]}}
    for key in ('speed', 'async'):
        figures[key]['headline'] = True
    items = run_summary.speedups({'pytorch': [{'name': '01_x', 'title': '4.6 GPU计算',
                                               'figures': figures}]})
    assert [(it['key'], it['verdict']) for it in items] == [('PyTorch 01_x: speed', 'faster'),
                                                             ('PyTorch 01_x: async', 'plain')]
    run_summary.draw_chart(items, tmp_path / 'chart.png')
    assert (tmp_path / 'chart.png').read_bytes()[:4] == b'\x89PNG'


def test_record_keeps_a_kind_and_old_records_read_without_one(tmp_path, monkeypatch):
    from d2lzh import results
    out = tmp_path / 'figures.jsonl'
    monkeypatch.setenv('D2LZH_RESULTS', str(out))
    results.record('flop_rate_ratio', 244.0, 'x', what='每次浮点运算的速度', kind='ratio')
    with open(out, 'a', encoding='utf-8') as f:  # a line written before kind existed
        f.write(json.dumps({'key': 'old_speedup', 'value': 1.5, 'unit': 'x'}) + '\n')
    figures = read_figures(out)
    assert figures['flop_rate_ratio']['kind'] == 'ratio' and figures['old_speedup']['kind'] is None
    assert run_summary.kind_of('old_speedup', figures['old_speedup']) == 'speedup'
    assert run_summary.kind_of('flop_rate_ratio', dict(figures['flop_rate_ratio'], kind=None)) \
        == 'ratio'
    with pytest.raises(ValueError, match="kind='speed-up' 无效：请用 .* 之一或 None"):
        results.record('x', 1.0, 'x', kind='speed-up')


# ---------------------------------------------------------------- any record
# PyTorch 02's headline as an older notebook recorded it on a CPU: its range rounded to 2
# decimals, the first repeat's 25 s compile made the low bound 0.0 (issue 47).
ZERO_LOW = {'value': 0.41, 'unit': 'x', 'spread': [0.0, 0.58], 'headline': True, 'kind': 'speedup',
            'what': '书中的 MLP 用 torch.compile 后的加速比', 'tags': ['CPU（2 个线程）'], 'gpus': 0}


def _record(build, figures, edition='pytorch', name='02_hybridize', **row):
    """Write one notebook's results file as run_notebooks.py does; returns its path."""
    path = build / 'run' / edition / 'results' / f'{name}.json'
    path.parent.mkdir(parents=True, exist_ok=True)
    row = dict({'notebook': f'notebooks/{name}.ipynb', 'edition': edition, 'name': name,
                'title': '8.1 命令式和符号式混合编程', 'status': 'ok', 'seconds': 300.0,
                'cpu_cores': 2, 'finished': '2026-11-28 10:00', 'figures': figures, 'error': ''},
               **row)
    path.write_text(json.dumps(row, ensure_ascii=False), encoding='utf-8')
    return path


def _summarise(build):
    """write_summary with the real chart: (console lines, summary.md, the chart's bytes or None)."""
    rows, history = run_summary.write_summary(
        build, lambda text, dest: dest.write_text(text, encoding='utf-8'))
    run = build / 'run'
    chart = run / 'summary.png'
    assert not [p.name for p in run.iterdir() if p.name.endswith('.part')]  # no temporary file
    return (run_summary.summary_lines(rows, history), (run / 'summary.md').read_text('utf-8'),
            chart.read_bytes() if chart.exists() else None)


def test_a_zero_bound_is_charted_and_a_positive_ratio_never_reads_0(tmp_path):
    _record(tmp_path, {'compile_speedup': ZERO_LOW,
                       'fusion_speedup': dict(ZERO_LOW, headline=False, value=0.02,
                                              spread=[0.0031, 0.058])})
    lines, text, chart = _summarise(tmp_path)
    assert chart[:4] == b'\x89PNG' and '](summary.png)' in text
    take = next(ln for ln in lines if ln.startswith('  8.1 '))
    # a bound recorded as 0 is shown as recorded; unrounded small ratios keep 2 digits
    assert '反而慢了，只有原来速度的 0.41×（范围 0.00×–0.58×）' in take, take
    assert '| 0.020×（0.0031×–0.058×） |' in text
    assert [run_summary.format_value(v, 'x') for v in (0.0031, 0.00049, 0.1, 0.058)] == \
        ['0.0031×', '0.00049×', '0.10×', '0.058×']


def test_a_negative_or_zero_value_is_summarised_and_left_off_the_chart(tmp_path):
    (tmp_path / 'run').mkdir()
    (tmp_path / 'run' / 'summary.png').write_bytes(b'old chart')
    _record(tmp_path, {'compile_speedup': dict(ZERO_LOW, value=-0.5, spread=[-1.0, 0.0])})
    _record(tmp_path, {'copy_speedup': dict(ZERO_LOW, value=0, spread=None)}, name='01_use-gpu',
            title='4.6 GPU计算')
    lines, text, chart = _summarise(tmp_path)
    assert chart is None and '](summary.png)' not in text  # nothing a log axis can show
    assert '-0.50×（范围 -1.00×–0.00×）' in text and '0.00×（没有记录重复的范围，不判断快慢）' in text
    # a positive value with a negative bound is charted, its error bar to the axis's edge
    _record(tmp_path, {'compile_speedup': dict(ZERO_LOW, value=1.3, spread=[-2.0, 1.6])})
    assert _summarise(tmp_path)[2][:4] == b'\x89PNG'


@pytest.mark.parametrize('spread', [[None, 0.58], [0.58], [], [float('nan'), 0.58], 'x'])
def test_a_missing_bound_is_no_range_and_no_verdict(tmp_path, spread):
    _record(tmp_path, {'compile_speedup': dict(ZERO_LOW, spread=spread)})
    lines, text, chart = _summarise(tmp_path)
    assert chart[:4] == b'\x89PNG'
    take = next(ln for ln in lines if ln.startswith('  8.1 '))
    words = '没有记录完整的重复的范围' if spread else '没有记录重复的范围'
    assert f'0.41×（{words}，不判断快慢）' in take, take
    assert '慢了' not in take and '快了' not in take


def test_a_missing_figure_or_value_is_said_in_words(tmp_path):
    _record(tmp_path, {})
    _record(tmp_path, {'speedup': {'unit': 'x', 'headline': True}}, name='03_async-computation',
            title='8.2 异步计算')
    _record(tmp_path, {'acc': {'value': None, 'kind': 'accuracy', 'spread': [0.1, 0.2]},
                       'nan_speedup': {'value': float('nan'), 'unit': 'x', 'headline': True,
                                       'spread': [float('inf'), 2.0]}},
            name='04_auto-parallelism', title='8.3 自动并行计算', figures_note=None)
    (tmp_path / 'run' / run_summary.HISTORY).write_text(
        '{"edition": "pytorch", "name": "02_hybridize", "figures": null}\n7\n'
        '{"edition": "pytorch", "name": "03_async-computation", "figures": {"speedup": "x"}}\n'
        '{"edition": "pytorch", "name": "03_async-computation", "figures": {"speedup": 1.5}}\n')
    lines, text, chart = _summarise(tmp_path)
    assert chart is None
    assert '  8.1 命令式和符号式混合编程：没有记录任何数字。' in lines
    assert '8.2 异步计算：前端不等每一步的结果、让后端在后面执行，能快多少？speedup：' \
        '没有数值（没有记录数值，不判断快慢）。' in '\n'.join(lines)
    assert 'nan×（没有记录数值，不判断快慢）' in text  # NaN shown as recorded, no verdict


def test_one_edition_only(tmp_path):
    _record(tmp_path, {'compile_speedup': dict(ZERO_LOW, value=0.61, spread=[0.56, 0.65])})
    lines, text, chart = _summarise(tmp_path)
    assert lines[0] == 'PyTorch 版（notebooks/pytorch/）：2 个 CPU 核心，没有 PyTorch 能用的 GPU'
    assert 'MXNet' not in '\n'.join(lines) + text and chart[:4] == b'\x89PNG'
    assert '## PyTorch 版：每个笔记本' in text


def test_an_empty_results_folder(tmp_path):
    (tmp_path / 'run' / 'pytorch' / 'results').mkdir(parents=True)
    (tmp_path / 'run' / 'summary.png').write_bytes(b'a chart of results no longer there')
    lines, text, chart = _summarise(tmp_path)
    assert lines == [run_summary.NOTHING] and run_summary.NOTHING in text and chart is None


def test_the_previous_chart_stays_until_a_new_one_is_drawn(tmp_path, monkeypatch):
    import summary_chart
    path = _record(tmp_path, {'compile_speedup': dict(ZERO_LOW, value=0.61, spread=[0.56, 0.65])})
    _, first_text, first = _summarise(tmp_path)
    (tmp_path / 'run' / 'summary.png').write_bytes(b'previous chart')

    def broken_axis(*args):
        raise ValueError('math domain error')
    monkeypatch.setattr(summary_chart, '_draw', broken_axis)
    with pytest.raises(run_summary.SummaryError) as err:
        _summarise(tmp_path)
    assert (tmp_path / 'run' / 'summary.png').read_bytes() == b'previous chart'
    assert (tmp_path / 'run' / 'summary.md').read_text('utf-8') == first_text
    assert not [p for p in (tmp_path / 'run').iterdir() if p.name.endswith('.part')]
    message = str(err.value)
    assert f'{path} 让汇总出错（ValueError: math domain error）' in message
    assert 'make run EDITION=pytorch NOTEBOOKS=02_hybridize BUILD=' in message
    assert 'make clean BUILD=' in message
    monkeypatch.undo()
    assert _summarise(tmp_path)[2] == first  # drawn again: replaced


@pytest.mark.parametrize('content, why', [
    ('{"edition": "pytorch", "name": "02_hyb', 'JSONDecodeError'),
    ('[1, 2]', '不是 make run 写下的笔记本记录'),
    ('{"edition": "pytorch", "name": "02_hybridize", "figures": {"a": 1}}', 'figures 不是'),
    ('{"edition": "pytorch", "name": "02_hybridize", "title": 5}', 'AttributeError')])
def test_a_record_that_breaks_the_summary_is_named_with_the_fix(tmp_path, content, why):
    path = _record(tmp_path, {})
    path.write_text(content, encoding='utf-8')
    with pytest.raises(run_summary.SummaryError) as err:
        _summarise(tmp_path)
    message = str(err.value)
    assert message.startswith(f'{path} 让汇总出错（') and why in message, message
    assert '请重新运行这个笔记本（make run EDITION=pytorch NOTEBOOKS=02_hybridize BUILD=' in message
    assert re.search(r'或者用 make clean BUILD=\S+ 删掉之前的所有结果', message), message
    assert not (tmp_path / 'run' / 'summary.md').exists()
