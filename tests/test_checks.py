"""d2lzh.checks: the argument checks both editions share (no framework needed)."""
import pytest

from d2lzh import checks


def test_choose_gpus_rule():
    assert checks.choose_gpus(2, [0, 1, 2]) == [0, 1]
    assert checks.choose_gpus(3, []) == []  # the caller lets the CPU stand in
    with pytest.warns(RuntimeWarning, match=r'asked for 3 GPUs but only 2 work here '
                                            r'\(GPU-0, GPU-1\); using 2'):
        assert checks.choose_gpus(3, [0, 1], lambda i: f'GPU-{i}') == [0, 1]


@pytest.mark.parametrize('bad', [0, -1, 2.0, True, '2'])
def test_choose_gpus_rejects(bad):
    with pytest.raises(ValueError, match=r'num=.* is not valid: it must be a positive whole number'):
        checks.choose_gpus(bad, [0])


def test_check_positive_int_and_examples_seen():
    checks.check_positive_int('batch_size', 3)
    checks.check_positive_int('resize', None, allow_none=True)
    with pytest.raises(ValueError, match=r'batch_size=0 is not valid.*positive whole number$'):
        checks.check_positive_int('batch_size', 0)
    with pytest.raises(ValueError, match='no examples'):
        checks.check_examples_seen(0)


def test_speedup_sentence_never_rounds_a_direction_away():
    from d2lzh.timing import format_ratio, speedup
    assert [format_ratio(v) for v in (1.0, 0.994, 0.9971, 1.0004, 0.99996, 3.0)] == \
        ['1.00', '0.99', '0.997', '1.0004', '1.0000', '3.00']
    slower = str(speedup([1.0] * 3, [1.003, 1.004, 1.002]))
    assert slower.startswith('反而慢了：只有原来的 0.997 倍速度') and '范围 0.996–0.998' in slower
    assert '差别不到 1%' in slower and '1.00' not in slower
    assert str(speedup([1.0] * 3, [0.5, 0.6, 0.55])).startswith('快了 1.82 倍（3 次重复')
    assert '测不出差别' in str(speedup([1.0, 1.0], [0.9, 1.1]))
