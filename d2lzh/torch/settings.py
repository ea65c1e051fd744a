"""Settings as frozen dataclasses whose fields are validated and are also command-line flags
(beyond the book): each field is declared once, with :func:`setting`, and from it come its
check (:func:`check_fields`), its flag and its help (:func:`add_flags`). Used by
:class:`d2lzh.torch.recipe.Recipe` and :class:`d2lzh.torch.ddp.Job`.
"""
import argparse
import dataclasses
import numbers

__all__ = ['setting', 'check_fields', 'add_flags', 'from_flags']


def setting(default, help, kind=None, choices=None, valid=None):
    """A field of a settings dataclass: default, help (its flag's too), type and choices where
    the default does not show them, and ``valid``, an interval such as ``'[0, 1)'``."""
    return dataclasses.field(default=default, metadata={
        'help': help, 'kind': kind or type(default), 'choices': choices, 'valid': valid})


def check_fields(settings):
    """Raise ValueError, naming the field and what is valid, for a field of ``settings``
    (made with :func:`setting`) of the wrong type, not among its choices or out of range."""
    for f in dataclasses.fields(settings):
        value, meta = getattr(settings, f.name), f.metadata
        kind, choices, valid = meta['kind'], meta['choices'], meta['valid']
        types = {int: numbers.Integral, float: numbers.Real}.get(kind, kind)
        if value is None and f.default is None:
            continue
        if choices is not None and value not in choices:
            need = f'one of {choices}'
        elif isinstance(value, bool) != (kind is bool) or not isinstance(value, types):
            need = {bool: 'True or False', int: 'a whole number', float: 'a number'}.get(
                kind, 'a string')
        elif valid is not None and not _within(value, valid):
            need = f'a value in {valid}'
        else:
            continue
        raise ValueError(f'{f.name}={value!r} is not valid: use {need}')


def _within(value, interval):
    """Whether ``value`` lies in ``interval``, e.g. '[0, 1)' or '(0, inf)'."""
    lo, hi = (float(x) for x in interval[1:-1].split(','))
    return (lo <= value if interval[0] == '[' else lo < value) and \
        (value <= hi if interval[-1] == ']' else value < hi)


def add_flags(parser, settings):
    """Add one flag per field of the dataclass ``settings`` to the argparse ``parser``:
    ``lr_warmup`` is ``--lr-warmup``, a bool ``--x``/``--no-x``, None is written ``none``. A
    flag not given is absent from the parsed namespace (see :func:`from_flags`)."""
    for f in dataclasses.fields(settings):
        kind, choices, valid = (f.metadata[key] for key in ('kind', 'choices', 'valid'))
        options = {'default': argparse.SUPPRESS, 'help': f"{f.metadata['help']} (default: "
                   f"{f.default}{', in ' + valid if valid else ''})"}
        if kind is bool:
            options['action'] = argparse.BooleanOptionalAction
        else:
            options['type'] = lambda text, kind=kind: None if text == 'none' else kind(text)
            options['type'].__name__ = kind.__name__  # argparse's error messages name it
            if choices:
                options.update(choices=choices,
                               metavar='{%s}' % ','.join(str(c).lower() for c in choices))
        parser.add_argument('--' + f.name.replace('_', '-'), **options)


def from_flags(namespace, base):
    """``base`` (a settings dataclass) with the fields given as flags in ``namespace``.

    Raises:
        ValueError: a value the dataclass refuses.
    """
    return dataclasses.replace(base, **{f.name: getattr(namespace, f.name)
                                        for f in dataclasses.fields(base)
                                        if hasattr(namespace, f.name)})
