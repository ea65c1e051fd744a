"""Argument checks shared by both editions (no framework here): one mistake, one message.
``split_and_load`` keeps its check written out: 8.4 shows it as a ``#@save`` copy."""
import dataclasses
import numbers
import warnings


def check_positive_int(name, value, allow_none=False):
    """Raise ValueError naming ``name`` unless ``value`` is a positive int (None too with
    ``allow_none``), ``True`` and ``2.0`` not: batch sizes, ``resize``, device counts."""
    if value is None and allow_none:
        return
    if not whole(value, 1):
        raise ValueError(f'{name}={value!r} 无效：请用正整数{"或 None" if allow_none else ""}')


def choose_gpus(num, gpus, describe=str, stacklevel=3):
    """The rule of ``try_devices(num)`` in both editions (8.4, 8.5): of ``gpus`` (the indices
    of the GPUs that work here), the first ``num`` (int >= 1, else ValueError); all of them,
    with a RuntimeWarning naming each by ``describe(index)``, when there are fewer; ``[]`` when
    there is none (the CPU stands in). ``stacklevel``: :func:`warnings.warn`'s (the user's line)."""
    check_positive_int('num', num)
    gpus = list(gpus)
    if gpus and len(gpus) < num:
        names = ', '.join(describe(i) for i in gpus)
        warnings.warn(f'要 {num} 块 GPU，这里只有 {len(gpus)} 块能用（{names}）：就用这 '
                      f'{len(gpus)} 块，代码在较少的设备上照样能跑；最多要 {len(gpus)} 块就'
                      '不会有这条警告。', RuntimeWarning, stacklevel=stacklevel)
    return gpus[:num]


def check_examples_seen(n):
    """Raise ValueError when an evaluation saw no example (``n == 0``)."""
    if n == 0:
        raise ValueError('evaluate_accuracy：data_iter 没有给出任何样本，请传入非空的数据')


def check(obj, rules):
    """Raise ValueError ``name=value 无效：请用need`` for the first of ``rules`` ((field name,
    ok, need: Chinese read after 请用), in order) of the dataclass ``obj`` that is not ok."""
    for name, ok, need in rules:
        if not ok:
            raise ValueError(f'{name}={getattr(obj, name)!r} 无效：请用{need}')


def flag_rules(obj):
    """:func:`check`'s rules: each field of the dataclass ``obj`` typed bool holds a bool."""
    return [(f.name, isinstance(getattr(obj, f.name), bool), '布尔值 True 或 False')
            for f in dataclasses.fields(obj) if f.type is bool]


def whole(value, low):
    """Whether ``value`` is an int (not a bool) >= ``low``."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool) and value >= low


def real(value, low, high, closed='[)'):
    """Whether ``value`` is a number (not a bool) in the interval ``low``..``high``, its ends
    closed ('[', ']') or open ('(', ')') as ``closed`` says."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and \
        (low <= value if closed[0] == '[' else low < value) and \
        (value <= high if closed[1] == ']' else value < high)
