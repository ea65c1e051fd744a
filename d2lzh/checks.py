"""Argument checks and their messages, shared by both editions (beyond the book).

:mod:`d2lzh.mxnet` and :mod:`d2lzh.torch` call the same functions here, so the
same mistake gets the same message in either edition and the device policy of
``try_devices`` is one rule, not two. Nothing here imports MXNet or PyTorch.

``split_and_load`` keeps its check written out in each edition: notebook 8.4
(``05_multiple-gpus``) shows the function, check included, and its ``#@save``
copy must be the package's code.
"""
import warnings

import numpy as np

__all__ = ['check_positive_int', 'check_num_devices', 'choose_gpus', 'check_examples_seen']


def check_positive_int(name, value, allow_none=False):
    """Raise ValueError unless ``value`` is a positive int (or None if allowed).

    Used for ``batch_size``, ``resize``, process counts and the like by both
    editions. ``True`` and floats such as ``2.0`` are refused.
    """
    if value is None and allow_none:
        return
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f'{name}={value!r} is not valid: it must be a positive whole '
                         f'number{" or None" if allow_none else ""}')


def check_num_devices(num):
    """Raise ValueError unless ``num`` (devices asked for) is a positive int."""
    if isinstance(num, bool) or not isinstance(num, (int, np.integer)) or num < 1:
        raise ValueError(f'num={num!r}: ask for a positive whole number of devices')


def choose_gpus(num, gpus, describe=str, stacklevel=3):
    """The rule of ``try_devices(num)`` in both editions (chapter 8.4/8.5).

    Args:
        num (int): devices asked for, >= 1.
        gpus (list of int): indices of the GPUs that work on this machine.
        describe (callable): GPU index -> text naming it in the warning.
        stacklevel (int): passed to :func:`warnings.warn` (the user's line).

    Returns:
        list of int: the first ``num`` GPUs; all of them (with a
        RuntimeWarning that names them) when there are fewer than ``num``;
        ``[]`` when there is none, meaning the CPU stands in for each device.

    Raises:
        ValueError: ``num`` is not a positive int.
    """
    check_num_devices(num)
    gpus = list(gpus)
    if gpus and len(gpus) < num:
        names = ', '.join(describe(i) for i in gpus)
        warnings.warn(f'asked for {num} GPUs but only {len(gpus)} work here ({names}); '
                      f'using {len(gpus)}. The code runs with fewer devices; ask for at '
                      f'most {len(gpus)} to silence this warning.', RuntimeWarning,
                      stacklevel=stacklevel)
    return gpus[:num]


def check_examples_seen(n):
    """Raise ValueError when an evaluation saw no example (``n == 0``)."""
    if n == 0:
        raise ValueError('evaluate_accuracy: data_iter yielded no examples')
