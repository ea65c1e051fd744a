"""README's first screen: what a reader of the book needs first, with the costs of a run that
is recorded in the repository (tests/data/make-run-mxnet-2cores.json), not typed by hand."""
import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RECORDED = ROOT / 'tests' / 'data' / 'make-run-mxnet-2cores.json'


def _first_screen():
    text = (ROOT / 'README.md').read_text(encoding='utf-8')
    return text[:text.index('**In English.**')]


def test_first_screen_names_the_commands_a_reader_needs():
    screen = _first_screen()
    for command in ('make run', 'make lab', 'make lab-reset NOTEBOOKS=', 'make run NOTEBOOKS=',
                    'EDITION=pytorch', 'make test'):
        assert command in screen, command
    assert screen.index('make run') < screen.index('make test'), 'make test is for contributors'
    assert len(screen.splitlines()) <= 30


def test_first_screen_costs_come_from_the_recorded_run():
    recorded = json.loads(RECORDED.read_text(encoding='utf-8'))
    rows = recorded['rows']
    assert len(rows) == 7 and all(r['status'] == 'ok' and r['cpu_cores'] == 2 for r in rows)
    slowest = max(rows, key=lambda r: r['seconds'])
    disk = recorded['disk_mb']
    expected = {
        'make run 的 7 个笔记本共运行约': round(sum(r['seconds'] for r in rows) / 60),
        f"最慢的是 {slowest['title']}，约": round(slowest['seconds'] / 60),
        '依赖，约': disk['venv'], '再加约': disk['lab'], '数据（Fashion-MNIST）约': disk['data']}
    screen = _first_screen().replace('`', '')
    for words, value in expected.items():
        m = re.search(re.escape(words) + r' (\d+) ', screen)
        assert m and int(m.group(1)) == value, f'{words!r}: README says ' \
            f'{m and m.group(1)}, the recorded run {value}'
