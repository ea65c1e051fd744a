"""d2lzh.checks: the argument checks both editions share (no framework needed)."""
import pytest

from d2lzh import checks


def test_choose_gpus_rule():
    assert checks.choose_gpus(2, [0, 1, 2]) == [0, 1]
    assert checks.choose_gpus(3, []) == []  # the caller lets the CPU stand in
    with pytest.warns(RuntimeWarning, match=r'要 3 块 GPU，这里只有 2 块能用'
                                            r'（GPU-0, GPU-1）：就用这 2 块'):
        assert checks.choose_gpus(3, [0, 1], lambda i: f'GPU-{i}') == [0, 1]


@pytest.mark.parametrize('bad', [0, -1, 2.0, True, '2'])
def test_choose_gpus_rejects(bad):
    with pytest.raises(ValueError, match=r'num=.* 无效：请用正整数$'):
        checks.choose_gpus(bad, [0])


def test_check_positive_int_and_examples_seen():
    checks.check_positive_int('batch_size', 3)
    checks.check_positive_int('resize', None, allow_none=True)
    with pytest.raises(ValueError, match=r'batch_size=0 无效：请用正整数$'):
        checks.check_positive_int('batch_size', 0)
    with pytest.raises(ValueError, match='data_iter 没有给出任何样本'):
        checks.check_examples_seen(0)


def test_speedup_sentence_never_rounds_a_direction_away():
    from d2lzh.timing import format_ratio, speedup
    assert [format_ratio(v) for v in (1.0, 0.994, 0.9971, 1.0004, 0.99996, 3.0)] == \
        ['1.00', '0.99', '0.997', '1.0004', '0.9999', '3.00']  # 0.99996: below 1, so 0.9999
    # A clear 0.3 % is still noise: one wording, whichever side of 1 the repeats fell.
    for faster in ([1.003, 1.004, 1.002], [0.997, 0.996, 0.998], [0.9, 1.1, 1.0]):
        s = speedup([1.0] * 3, faster)
        assert s.direction == 0
        assert str(s).startswith('测不出明显差别（比值 ') and '算作噪声' in str(s)
    assert '测不出明显差别（比值 0.997，' in str(speedup([1.0] * 3, [1.003, 1.004, 1.002]))
    assert str(speedup([1.0] * 3, [0.5, 0.6, 0.55])).startswith('快了 1.82 倍（3 次重复')
    slower = speedup([1.0] * 3, [1.3, 1.4, 1.35])
    assert slower.direction == -1 and str(slower).startswith('反而慢了：只有原来的 0.74 倍速度')
    # Every repeat faster but the median under 10 % (1.05): no direction either.
    assert speedup([1.0] * 3, [0.95, 0.96, 0.94]).direction == 0
    assert speedup([1.0] * 3, [0.9, 0.9, 0.9]).direction == 1  # 1.11: past the band
    # Without a verdict: the same digits as str() gives, never a direction word.
    for faster in ([0.5, 0.6, 0.55], [1.003, 1.004, 1.002], [1.3, 1.4, 1.35]):
        s = speedup([1.0] * 3, faster)
        text = s.ratio_text()
        median, spread = text.rstrip('）').split('（', 1)
        assert median == format_ratio(s.median) and spread in str(s)
        assert not any(word in text for word in ('快', '慢', '噪声'))
    assert speedup([1.0] * 3, [1.003, 1.004, 1.002]).ratio_text() == \
        '0.997（3 次重复的中位数，范围 0.996–0.998）'
