"""README's first screen: what a reader of the book needs first, with the costs of runs that
are recorded in the repository (tests/data/make-run-cost.json), not typed by hand."""
import json
import re
from pathlib import Path

from d2lzh import project

ROOT = Path(__file__).resolve().parent.parent
COST = ROOT / 'tests' / 'data' / 'make-run-cost.json'


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


def test_first_screen_clones_the_repository_and_warns_of_the_cuda_build_of_torch():
    """The clone command names the repository of pyproject.toml's Source URL; the line of
    ``make run EDITION=pytorch`` says how to get the CPU build of the pinned torch first."""
    owner, repo, _ = project.repository()
    screen = _first_screen()
    assert f'git clone https://github.com/{owner}/{repo}.git && cd {repo}\n' in screen
    pin = re.search(r'^torch==(\S+)$', (ROOT / 'requirements-torch.txt').read_text(), re.M)[1]
    cpu = f'pip install torch=={pin} --index-url https://download.pytorch.org/whl/cpu'
    line = next(ln for ln in screen.splitlines() if 'make run EDITION=pytorch' in ln)
    assert 'CUDA' in line and cpu in line, line
    for name in ('README.md', 'requirements-torch.txt'):     # every mention: the pin
        text = (ROOT / name).read_text(encoding='utf-8')
        assert set(re.findall(r'torch==(\S+)', text)) == {pin}, name


def test_first_screen_costs_come_from_the_recorded_runs():
    """The time as a range over the recorded runs of `make run` (each on a 2-core machine: the
    fastest and the slowest recorded, never an extrapolation); the slowest notebook of the
    newest run; the largest peak memory recorded; the disk of the same record, the CPU build
    of torch included."""
    cost = json.loads(COST.read_text(encoding='utf-8'))
    runs = cost['runs']
    assert len({r['machine'] for r in runs}) >= 2, 'runs on at least two 2-core machines'
    assert all('2 cores' in r['machine'] and r['commit'] and r['date'] for r in runs)
    totals = [r['total_seconds'] for r in runs]
    newest = max(runs, key=lambda r: r['date'])
    assert len(newest['notebooks']) == 7
    assert round(sum(n['seconds'] for n in newest['notebooks'].values())) == \
        round(newest['total_seconds'])
    slowest = max(newest['notebooks'].values(), key=lambda r: r['seconds'])
    expected = {
        'make run 的 7 个笔记本共运行约': f'{round(min(totals) / 60)}–{round(max(totals) / 60)}',
        f"最慢的是 {slowest['title']}，约": f"{round(slowest['seconds'] / 60)}",
        '内存最多占用约': f"{max(r['peak_memory_mb'] for r in runs) / 1024:.1f}",
        '依赖，约': f"{cost['disk_mb']['venv']}", '再加约': f"{cost['disk_mb']['lab']}",
        'CPU 版的 torch 再加约': f"{cost['disk_mb']['torch']}",
        '数据（Fashion-MNIST）约': f"{cost['disk_mb']['data']}"}
    screen = _first_screen().replace('`', '')
    for words, value in expected.items():
        m = re.search(re.escape(words) + r' ([\d.]+(?:–\d+)?) ', screen)
        assert m and m.group(1) == value, f'{words!r}: README says {m and m.group(1)}, ' \
            f'the record {value}'


def test_readme_fast_path_figures_are_the_bench_run_it_names():
    """README's one-GPU figures: those of the time-to-accuracy run it names, for the config
    that runs README's script (bench_torch's recipe_no_conv_bias: d2l.cold_start's lines)."""
    text = (ROOT / 'README.md').read_text(encoding='utf-8')
    name = re.search(r'`(bench/results/[^`]+-time-to-accuracy\.json)`', text)[1]
    c = json.loads((ROOT / name).read_text())['configs']['recipe_no_conv_bias']
    runs = [r for r in c['runs'] if 'error' not in r]
    after = sum(r['reached_s'] - r['items']['python_start'] - r['items']['import_torch']
                for r in runs) / len(runs)
    assert (f"0.92 {c['reached_s']['mean']:.2f} s after the process started "
            f"({c['reached_s']['min']:.2f}-{c['reached_s']['max']:.2f} s), {after:.2f} s after\n"
            f"`import torch`, at {c['images_per_s']['mean']:,.0f} images/s") in text
    assert c['config']['conv_bias'] is False and c['config']['recipe']['batch_size'] == 512


def test_bench_readme_fast_options_figures_are_the_run_it_names():
    """bench/README.md's two tables of bench_fast_options.py: each row's figures are those of
    the JSON the section names (FAST's changes; fresh processes: eager, aot, mega)."""
    text = (ROOT / 'bench' / 'README.md').read_text(encoding='utf-8')
    section = text[text.index('### Options that did not make'):]
    name = re.search(r'`(NVIDIA-[^`]+-fast-options\.json)`', section)[1]
    result = json.loads((ROOT / 'bench' / 'results' / name).read_text())
    rows = {line.split('|')[1].strip().replace('`', ''): line
            for line in section.splitlines() if line.startswith('| ')}
    mean = lambda values: sum(values) / len(values)  # noqa: E731
    names = dict.fromkeys(v['name'] for v in result['variants'])
    assert len(names) == 8
    for name in names:
        runs = [v for v in result['variants'] if v['name'] == name]
        acc = [r['test_acc'][-1] for r in runs]
        row = rows['nothing changed' if name == 'fast' else name]
        assert (f"| {mean(acc):.4f} | {mean([r['flip_acc'] for r in runs]):.4f} | "
                f"{mean([r['images_per_s'] for r in runs]):,.0f} | "
                f"{sum(a >= 0.92 for a in acc)}/{len(runs)} |") in row, row
    for mode, start in [('eager', 'FAST (README'), ('aot', 'forward compiled once'),
                        ('mega', 'torch.compile with')]:
        runs = result[mode]
        row = next(line for key, line in rows.items() if key.startswith(start))
        reached = [r['reached_s'] for r in runs]
        load = [r['marks']['load'] - r['marks']['cuda'] for r in runs if 'load' in r['marks']]
        assert (f"{mean(reached):.2f} s [{min(reached):.2f}, {max(reached):.2f}] | "
                f"{mean([r['reached_s'] - r['marks']['import torch'] for r in runs]):.2f} s | "
                f"{f'{mean(load):.2f} s' if load else '-'} | "
                f"{mean([r['history']['startup_s'] for r in runs]):.2f} s | "
                f"{mean([r['history']['images_per_s'] for r in runs]):,.0f} |") in row, row
    compiled = result['aot_compile']
    assert f"({compiled['compile_s']:.1f} s, {compiled['bytes'] / 1e6:.1f} MB file)" in section
    assert f"(the first process: {result['mega_first']['reached_s']:.1f} s)" in section


def test_bench_readme_fault_and_launch_figures_are_the_run_it_names():
    """bench/README.md's paragraph on faults and launch cost after the forked workers' signal
    fix: every second it quotes is one of the JSON files it names."""
    text = (ROOT / 'bench' / 'README.md').read_text(encoding='utf-8')
    name = re.search(r'`(NVIDIA-[^`]+-faults\.json)`', text)[1]
    start = text.index(f'`{name}`')
    paragraph = ' '.join(text[start:text.index('\n\n', start)].split())
    result = json.loads((ROOT / 'bench' / 'results' / name).read_text())
    tta = json.loads((ROOT / 'bench' / 'results' / name.replace('.json', '-time-to-accuracy.json'))
                     .read_text())['by_gpus']['2']
    faults = result['faults']['2']
    for launcher in ('fork', 'torchrun', 'run_ddp'):
        raised, killed = faults[f'{launcher} raise:1:1'], faults[f'{launcher} kill:1:1']
        assert f"{raised['seconds']:.2f} s" in paragraph and f"{killed['seconds']:.2f} s" in paragraph
        assert raised['gpu_processes_left'] == killed['gpu_processes_left'] == 0
        assert raised['exit_code'] == killed['exit_code'] == 1
    fork = faults['fork raise:1:1'], faults['fork kill:1:1']
    assert (f"{fork[0]['after_training_started_s']:.2f} s and "
            f"{fork[1]['after_training_started_s']:.2f} s after") in paragraph
    assert all(f['after_training_started_s'] < 10 for f in faults.values())
    single = [r['reached_s'] for r in result['best_single']['runs']]
    assert f'one-GPU script {min(single):.2f}-{max(single):.2f} s' in paragraph
    marks = [r['result']['marks'] for r in tta['fork']['runs']]
    for mark in ('imported', 'process_group', 'model', 'train_start', 'startup_done', 'reached'):
        values = [m[mark] for m in marks]
        assert f'{min(values):.2f}-{max(values):.2f} s' in paragraph, mark


def test_bench_readme_four_gpu_fault_figures_are_the_run_it_names():
    """bench/README.md's paragraph on the 4-GPU run: the kill on 4 GPUs ended within the seconds
    at which training started without a fault, and every figure it quotes is the JSON's."""
    name = 'NVIDIA-H100-80GB-HBM3-x4-2026-11-28-faults.json'
    text = (ROOT / 'bench' / 'README.md').read_text(encoding='utf-8')
    start = text.index(f'`{name}`')
    paragraph = ' '.join(text[start:text.index('\n\n', start)].split())
    result = json.loads((ROOT / 'bench' / 'results' / name).read_text())
    tta = json.loads((ROOT / 'bench' / 'results' / name.replace('.json', '-time-to-accuracy.json'))
                     .read_text())['by_gpus']
    kill = result['faults']['4']['fork kill:3:1']
    starts = [r['result']['marks']['train_start'] for r in tta['4']['fork']['runs']]
    assert kill['exit_code'] == 1 and kill['gpu_processes_left'] == 0
    assert f"{kill['seconds']:.2f} s" in paragraph and kill['seconds'] < max(starts) + 10
    assert f'{min(starts):.2f}-{max(starts):.2f} s' in paragraph
    for key, fault in result['faults']['2'].items():
        assert f"{fault['seconds']:.2f} s" in paragraph and fault['gpu_processes_left'] == 0, key
    single = [r['reached_s'] for r in result['best_single']['runs']]
    assert f'one-GPU script {min(single):.2f}-{max(single):.2f} s' in paragraph
    for n in ('1', '2', '4'):
        reached = [r['result']['marks']['reached'] for r in tta[n]['fork']['runs']]
        assert f'{min(reached):.2f}-{max(reached):.2f} s' in paragraph, n
        assert f"{tta[n]['torchrun']['runs'][0]['result']['marks']['reached']:.2f} s" in paragraph
    assert min(single) < min(r['result']['marks']['reached'] for r in tta['4']['fork']['runs'])
