"""The sanitizer's rules over every stored output: what each masks, and that none swallows a
word, a verdict or a whole line (tests/nbval_sanitize.cfg for every cell, then
tests/nbval_measured.cfg for cells tagged ``measured``; tests/nbval_tags.py)."""
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
ALLOWED_WORDS = {'sec', 's', 'ms', 'us', 'cpu', 'gpu', 'cpu_pinned', 'DEVICE', 'NVIDIA', 'GB',
                 'HBM', 'SXM', 'PCIe', 'NVL', 'e', 'E', 'x', 'BATCH', '秒', '毫', '微'}
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


def test_no_rule_masks_a_word_or_a_line(capsys):
    """Every match of every rule holds only digits, punctuation, units and device or GPU
    names; no line loses all its words; the masked outputs of a measured cell keep every
    verdict word (快/慢/相同/True/False ...). Prints, per rule, how many matches and examples."""
    base, measured = nbval_tags.measured_rules(BASE), nbval_tags.measured_rules()
    seen = collections.defaultdict(collections.Counter)
    for path, tags, text in _outputs():
        rules = base + (measured if 'measured' in tags else [])
        for name, regex, replace in rules:
            for m in regex.finditer(text):  # the words a match loses, groups it keeps aside
                words = set(WORD.findall(m.group())) - ALLOWED_WORDS - \
                    set(WORD.findall(m.expand(replace)))
                if name == 'gpu_names':  # a model name: letters and digits after NVIDIA
                    words -= set(WORD.findall(m.group()[len('NVIDIA '):]))
                assert not words, f'{path}: rule [{name}] masks the words {words} in {m.group()!r}'
                seen[name][m.group()] += 1
        masked = text
        for _, regex, replace in rules:
            masked = regex.sub(replace, masked)
        for before, after in zip(text.splitlines(), masked.splitlines()):
            words = set(WORD.findall(before)) - ALLOWED_WORDS
            assert not words or \
                set(WORD.findall(after)) - {'N', 'TIME', 'GPU', 'DEVICE', 'ADDRESS'}, \
                f'{path}: the line {before!r} lost every word: {after!r}'
        for verdict in ('快', '慢', '相同', 'True', 'False', '一致', '相反', '学会'):
            assert text.count(verdict) == masked.count(verdict), (path, verdict)
    with capsys.disabled():
        print()
        for name, counter in seen.items():
            examples = ', '.join(repr(k) for k, _ in counter.most_common(4))
            print(f'  [{name}] {sum(counter.values())} matches, e.g. {examples}')
    assert {name for name, _, _ in measured} <= set(seen), 'a rule of nbval_measured.cfg never matches'


@pytest.mark.parametrize('text, masked', [
    ('快了 2.95 倍（5 次重复的中位数，范围 2.54–3.37）', '快了 N 倍（N 次重复的中位数，范围 N–N）'),
    ('cuda:0 = NVIDIA H100 80GB HBM3', 'cuda:N = GPU'),
    ('replicas identical: True, 60,000 images, 1.5e+09', 'replicas identical: True, N images, N'),
    ('resnet18 conv2d cu130 sm_90', 'resnet18 conv2d cu130 sm_90'),
])
def test_measured_rules_mask_numbers_and_names_only(text, masked):
    assert nbval_tags.mask(text) == masked
