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
