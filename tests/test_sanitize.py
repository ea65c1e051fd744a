"""The sanitizer's rules over every stored output: what each masks, and that none swallows a
word, a verdict or a whole line (tests/nbval_sanitize.cfg for every cell, then
tests/nbval_measured.cfg for cells tagged ``measured``; tests/nbval_tags.py). Each rule holds an
example of what it masks and of what it keeps; the conclusions a section relies on (ranks,
epochs, exit codes, device indices, counts, thresholds, names) pass every rule unchanged."""
import collections
import json
import re
from pathlib import Path

import pytest

import nbval_tags
from d2lzh import project

ROOT = Path(__file__).resolve().parent.parent
BASE = ROOT / 'tests' / 'nbval_sanitize.cfg'
# The words a rule may take with the number it masks: units and device names, never a verdict.
ALLOWED_WORDS = {'sec', 's', 'ms', 'us', 'NVIDIA', 'GB', 'HBM', 'SXM', 'PCIe', 'NVL', 'e', 'E',
                 'BATCH', '秒', '毫', '微'}
WORD = re.compile(r'[A-Za-z_]+|[\u4e00-\u9fff]')


def _outputs():
    """(notebook, tags, text) of every stored text output."""
    for path in project.notebooks('all'):
        nb = json.loads((ROOT / path).read_text(encoding='utf-8'))
        for cell in nb['cells']:
            for out in cell.get('outputs', []):
                for text in (out.get('text'), out.get('data', {}).get('text/plain')):
                    if text:
                        yield path, cell['metadata'].get('tags', []), ''.join(text)


def _rules():
    """{name: (regex, replace)} of both files (their section names do not repeat)."""
    base, measured = nbval_tags.measured_rules(BASE), nbval_tags.measured_rules()
    assert not {n for n, _, _ in base} & {n for n, _, _ in measured}
    return {name: (regex, replace) for name, regex, replace in base + measured}


def _sanitize(text, measured=True):
    """``text`` as nbval compares it: the base rules, then (a measured cell) the measured ones."""
    text = nbval_tags.mask(text, nbval_tags.measured_rules(BASE))
    return nbval_tags.mask(text) if measured else text


def test_no_rule_masks_a_word_or_a_line(capsys):
    """Every match of every rule holds only digits, punctuation, units and device or GPU
    names; no line loses all its words; the masked outputs of a measured cell keep every
    verdict word (快/慢/相同/True/False ...); every rule of both files matches a stored
    output (a rule that matches nothing goes). Prints, per rule, how many matches and
    examples."""
    base, measured = nbval_tags.measured_rules(BASE), nbval_tags.measured_rules()
    seen = collections.defaultdict(collections.Counter)
    for path, tags, text in _outputs():
        rules = base + (measured if 'measured' in tags else [])
        masked = text
        for name, regex, replace in rules:  # each rule sees the text the earlier ones left
            for m in regex.finditer(masked):  # the words a match loses, groups it keeps aside
                words = set(WORD.findall(m.group())) - ALLOWED_WORDS - \
                    set(WORD.findall(m.expand(replace)))
                if name == 'gpu_names':  # a model name: letters and digits after NVIDIA
                    words -= set(WORD.findall(m.group()[len('NVIDIA '):]))
                assert not words, f'{path}: rule [{name}] masks the words {words} in {m.group()!r}'
                if m.group() != m.expand(replace):
                    seen[name][m.group()] += 1
            masked = regex.sub(replace, masked)
        for before, after in zip(text.splitlines(), masked.splitlines()):
            words = set(WORD.findall(before)) - ALLOWED_WORDS
            assert not words or \
                set(WORD.findall(after)) - {'N', 'TIME', 'GPU', 'SUBSET', 'BATCH'}, \
                f'{path}: the line {before!r} lost every word: {after!r}'
        for verdict in ('快', '慢', '相同', 'True', 'False', '一致', '相反', '学会'):
            assert text.count(verdict) == masked.count(verdict), (path, verdict)
    with capsys.disabled():
        print()
        for name, counter in seen.items():
            examples = ', '.join(repr(k) for k, _ in counter.most_common(4))
            print(f'  [{name}] {sum(counter.values())} matches, e.g. {examples}')
    unused = [name for name, _, _ in base + measured if name not in seen]
    assert not unused, f'rules that mask nothing in the stored outputs: {unused}'


def test_nbval_reads_the_base_rules_as_the_tests_do():
    """nbval reads ``regex:``/``replace:`` as two adjacent lines, verbatim: the same pairs, in
    the same order, as tests/nbval_tags.py reads (no comment between them, no quotes)."""
    from nbval.plugin import get_sanitize_patterns
    pairs = get_sanitize_patterns(BASE.read_text(encoding='utf-8'))
    assert pairs == [(regex.pattern, replace)
                     for _, regex, replace in nbval_tags.measured_rules(BASE)]


# Per rule: (text as it reaches the rule, after the rules before it; the rule's output). Each
# rule has at least one example it masks and one it keeps whole.
EXAMPLES = {
    'durations': [
        ('dot + wait_to_read time: 0.3761 sec', 'dot + wait_to_read time: TIME'),
        ('每步 28.1 微秒，3.66 秒', '每步 TIME，TIME'),
        ('目标（≤ 6.0 秒，import 之后 ≤ 2.0 秒）', '目标（≤ 6.0 秒，import 之后 ≤ 2.0 秒）'),
        ('第 3 个迭代周期，运行 2 秒', '第 3 个迭代周期，运行 2 秒'),
    ],
    'subset_batch_sizes': [
        ('小批量： (128, 1, 28, 28) | 标签： (128,)', '小批量： (BATCH, 1, 28, 28) | 标签： (BATCH,)'),
        ('小批量：1024 张图像', '小批量：1024 张图像'),
    ],
    'subset_test_images': [
        ('前 12800 张训练图像；在 10000 张测试图像上的测试准确率：', '前 12800 张训练图像；在 SUBSET 张测试图像上的测试准确率：'),
        ('使用全部 60000 张训练图像和 10000 张测试图像', '使用全部 60000 张训练图像和 10000 张测试图像'),
    ],
    'aligned_columns': [
        ('批量   128：每秒    9,788 张', '批量 128：每秒 9,788 张'),
        ('rank 1 (pid 3)', 'rank 1 (pid 3)'),
    ],
    'gpu_names': [
        ('cuda:0 = NVIDIA H100 80GB HBM3, cuda:1 = NVIDIA H200', 'cuda:0 = GPU, cuda:1 = GPU'),
        ('bench/results/NVIDIA-H200-x4-2026-11-27.json', 'bench/results/GPU-x4-2026-11-27.json'),
        ('DDP x2：NCCL 与 gloo，可用的 GPU（2 块）', 'DDP x2：NCCL 与 gloo，可用的 GPU（2 块）'),
    ],
    'machine_counts': [
        ('Python N, CUDA N, CPU 核心数：32', 'Python N, CUDA N, CPU 核心数：N'),
        ('cuda:0：GPU，计算能力 N，显存 N GiB，132 个 SM', 'cuda:0：GPU，计算能力 N，显存 N GiB，N 个 SM'),
        ('逻辑 CPU：2 个，每个运算的 OpenMP 线程：1 个', '逻辑 CPU：2 个，每个运算的 OpenMP 线程：1 个'),
    ],
    'quantities': [
        ('从 264 微秒变为 70 微秒，快了 16 倍', '从 N 微秒变为 N 微秒，快了 N 倍'),
        ('（21955 张/秒），53 images/sec，34830.9 GFLOP/s，2.90 TB/s',
         '（N 张/秒），N images/sec，N GFLOP/s，N TB/s'),
        ('64 MiB，4 KiB，0.52 MB，9.2 GB/s', 'N MiB，N KiB，N MB，N GB/s'),
        ('0.46x (0.45-0.49)，1.5×，6.1%，0 %', 'Nx (0.45-0.49)，N×，N%，N %'),
        ('每行 0.11~0.26 毫秒', '每行 N~N 毫秒'),
        ('期限是 120 秒，不到 2 倍，差别不到 10% 或方向不一，落在 10% 界线的两侧，以 2 倍为界',
         '期限是 120 秒，不到 2 倍，差别不到 10% 或方向不一，落在 10% 界线的两侧，以 2 倍为界'),
        ('16×16，2000x2000，2×T4，4000 × 97.8，DP x2，<NDArray 2x3 @cpu(0)>，resnet18 cu130',
         '16×16，2000x2000，2×T4，4000 × 97.8，DP x2，<NDArray 2x3 @cpu(0)>，resnet18 cu130'),
        ('每秒 ≥ 100,000 张，≤ 6.0 秒', '每秒 ≥ 100,000 张，≤ 6.0 秒'),
    ],
    'rates_per_second': [
        ('每秒 21,955 张，每秒 19,529~24,436 张，cpu(0) 每秒 1052 张图像',
         '每秒 N 张，每秒 N 张，cpu(0) 每秒 N 张图像'),
        ('每秒 ≥ 100,000 张', '每秒 ≥ 100,000 张'),
    ],
    'decimals': [
        ('epoch 2, loss 1.5243, time TIME, test acc 0.70', 'epoch 2, loss N, time TIME, test acc N'),
        ('Python 3.11.7, numpy 1.23.5, [2.0003661e+09], 8.7e-08, 1e-7',
         'Python N, numpy N, [N], N, N'),
        ('范围 2.54–3.37，(3632.48–4827.29)', '范围 N–N，(N–N)'),
        ('学会了（>= 0.6），准确率 >= 0.6，最大差别 < 1e-5，0.51 ms -> 0.21 ms',
         '学会了（>= 0.6），准确率 >= 0.6，最大差别 < 1e-5，N ms -> N ms'),
        ('降到 2.2 以下，回到 2.28 以上，低 0.05 以上，低于 0.2，达到 0.92，达到了 0.90，'
         '相差不到 0.05，学会了（高于随机猜测 0.1），最多比它低 0.02，学会了（以 0.6 为界）',
         '降到 2.2 以下，回到 2.28 以上，低 0.05 以上，低于 0.2，达到 0.92，达到了 0.90，'
         '相差不到 0.05，学会了（高于随机猜测 0.1），最多比它低 0.02，学会了（以 0.6 为界）'),
        ('记录：8.3-exercise1-workers-1.json（见 8.3 节），ResNet-18，sm_90，cuda:1',
         '记录：8.3-exercise1-workers-1.json（见 8.3 节），ResNet-18，sm_90，cuda:1'),
    ],
    'estimates': [
        ('最多约 1034 个，约 30 个批量的数据，约合 3、11、87 个批量，约相当于 15 次',
         '最多约 N 个，约 N 个批量的数据，约合 N 个批量，约相当于 N 次'),
        ('约 N 毫秒，第 2 个迭代周期', '约 N 毫秒，第 2 个迭代周期'),
    ],
    'fractions': [
        ('吞吐量是 1024×1024 的 1/133，是普通的 1/6', '吞吐量是 1024×1024 的 1/N，是普通的 1/N'),
        ('3/3 个进程达到 0.92，1/3 个进程，使用前 512/60000 张', '3/3 个进程达到 0.92，1/3 个进程，使用前 512/60000 张'),
    ],
    'process_ids': [
        ('worker (kv.rank 1, task 0, pid 13216)；local_rank: 1 (pid: 1417)',
         'worker (kv.rank 1, task N, pid N)；local_rank: 1 (pid: N)'),
        ('server (task 2, pid 13218)', 'server (task 2, pid N)'),
        ('worker (kv.rank 1, task 0)，rank 1，退出码 1', 'worker (kv.rank 1, task 0)，rank 1，退出码 1'),
    ],
    'work_done': [
        ('后端只做完了其中 12 个；GPU 已做完 999 个，还排着 643 个核函数',
         '后端只做完了其中 N 个；GPU 已做完 N 个，还排着 N 个核函数'),
        ('只提前生成了 2 个批量的数据，复制出了 50 个批量，多 35 个批量的数据，相差 +83 个批量的数据，'
         '相差 1 个批量', '只提前生成了 N 个批量的数据，复制出了 N 个批量，多 N 个批量的数据，'
         '相差 +N 个批量的数据，相差 N 个批量'),
        ('38 次复制，2 个其他运算； TIME TIME 2 N N 书中', 'N 次复制，N 个其他运算； TIME TIME N N N 书中'),
        ('启动：第 2 次；锁页内存块 2 块；新申请 2 块，从不同步 15 块；_sleep(190231)；做 12 次这样的乘法',
         '启动：第 2 次；锁页内存块 N 块；新申请 N 块，从不同步 N 块；_sleep(N)；做 N 次这样的乘法'),
        ('腾出位置的启动：第 2 次', '腾出位置的启动：第 N 次'),
        ('CopyCPU2CPU 1×N，DeleteVariable 1×N；DeleteVariable（后端释放数组的运算）：1 次',
         'CopyCPU2CPU 1×N，DeleteVariable N×N；DeleteVariable（后端释放数组的运算）：N 次'),
        ('不到 20 个批量的数据；cpu(0) 已做完 7 次乘法；第 50 个批量', '不到 20 个批量的数据；cpu(0) 已做完 7 次乘法；第 50 个批量'),
    ],
    'images_seen': [
        ('在看过 76800 张图像后降到 2.2 以下，看过 83456 张后，（第 79360 张图像）',
         '在看过 N 张图像后降到 2.2 以下，看过 N 张后，（第 N 张图像）'),
        ('第 3 个迭代周期，60000 张训练图像', '第 3 个迭代周期，60000 张训练图像'),
    ],
    'splits': [
        ('-> 切分为 [91, 37]，按速度切分为 [1015, 9]', '-> 切分为 [N, N]，按速度切分为 [N, N]'),
        ('设备： [cpu(0), cpu(1)]，第 1、2、3 个', '设备： [cpu(0), cpu(1)]，第 1、2、3 个'),
    ],
    'unitless_columns': [
        (' 7 24 182 TIME / TIME 复制已有的 NDArray', ' N N N TIME / TIME 复制已有的 NDArray'),
        (' 2 个工作进程 N N N 4684', ' 2 个工作进程 N N N N'),
        ('DDP x2 29883 TIME N\n批量 64，学习率 N 27489 N\n(g2) 52889 (g2) CUDA 图',
         'DDP x2 N TIME N\n批量 64，学习率 N N N\n(g2) N (g2) CUDA 图'),
        ('驱动报告的显存占用（MiB）：建立上下文后 1242，分配后 1306', '驱动报告的显存占用（MiB）：建立上下文后 N，分配后 N'),
        (' 256 1 N 234 N N 3\n第 4 个迭代周期之后达到 0.92 的最大总批量：512',
         ' 256 1 N 234 N N 3\n第 4 个迭代周期之后达到 0.92 的最大总批量：512'),
    ],
}


@pytest.mark.parametrize('name, text, masked', [
    (name, text, masked) for name, examples in EXAMPLES.items() for text, masked in examples])
def test_each_rule_masks_and_keeps(name, text, masked):
    regex, replace = _rules()[name]
    assert regex.sub(replace, text) == masked


def test_every_rule_has_an_example_it_masks_and_one_it_keeps():
    assert set(EXAMPLES) == set(_rules())
    for name, examples in EXAMPLES.items():
        assert any(t != m for t, m in examples), f'[{name}] has no example it masks'
        assert any(t == m for t, m in examples), f'[{name}] has no example it keeps whole'


@pytest.mark.parametrize('text', [
    'rank 1', 'DDP 工作进程 rank 1（共 2 个）失败，退出码 1', '退出码 -9 (SIGKILL)', '退出码 [0, 0]',
    '第 3 个迭代周期', '重启 1 次，从第 1 个迭代周期接着训练', '3 个迭代周期已完成 1 个',
    'cuda:1', 'b1 所在的设备： cuda:1', '<NDArray 4 @cpu(1)>', '[cpu(0), cpu(1)]',
    '学会了（>= 0.6）', '测试准确率 >= 0.6', '学会了（高于随机猜测 0.1）', '两次都低于 0.2',
    '学会了（以 0.6 为界）', '没有达到 0.6', '随机猜测 0.1。',
    '工作进程往这个笔记本的标准错误写了 2 行。', '其后是回溯，共 14 行，最后 3 行：',
    'ResNet-18', 'resnet18 conv2d cu130 sm_90', '它先训练完的有 0 种', '3/3 个进程达到 0.92',
    '--fault kill:1:3 -> 退出状态 1', '各副本完全相同：True',
])
def test_conclusions_pass_every_rule(text):
    assert _sanitize(text) == text


@pytest.mark.parametrize('text, masked', [
    ('快了 2.95 倍（5 次重复的中位数，范围 2.54–3.37）', '快了 N 倍（5 次重复的中位数，范围 N–N）'),
    ('cuda:0 = NVIDIA H100 80GB HBM3', 'cuda:0 = GPU'),
    ('replicas identical: True, 60,000 images, 1.5e+09', 'replicas identical: True, 60,000 images, N'),
    ('   3720.50  (3632.48–4827.29)  import torch（新进程里）', ' N (N–N) import torch（新进程里）'),
    ('epoch 1, loss 2.3026, time 22.2 sec, test acc 0.10', 'epoch 1, loss N, time TIME, test acc N'),
    ('参数服务器作业学会了（测试准确率 >= 0.6）：0.699', '参数服务器作业学会了（测试准确率 >= 0.6）：N'),
    ('迭代周期 2：损失 0.314，测试准确率 0.894，1.54 秒（19434 张/秒）',
     '迭代周期 2：损失 N，测试准确率 N，TIME（N 张/秒）'),
])
def test_measured_rules_mask_measurements_only(text, masked):
    assert _sanitize(text) == masked


def test_mxnet_contexts_are_compared_in_every_cell():
    """CI's CPU reproduces MXNet's contexts: no rule of either file touches them."""
    text = '<NDArray 2x3 @cpu(0)>\na1 + a0 的结果在 cpu(1) 上 gpu(1)'
    assert _sanitize(text, measured=False) == _sanitize(text) == text
