"""The summary of ``make run``: what every notebook run into ``build/run/`` measured.

Used by ``scripts/run_notebooks.py``. Each notebook's run leaves
``build/run/<edition>/results/NAME.json`` (status, wall time, the figures it recorded with
``d2l.record``); :func:`summary_markdown` turns them into one table per edition, every figure
tagged with what it was measured on, and says what this machine can and cannot show.
"""
import json
import re

TRAIN_SIZE = 60000  # Fashion-MNIST's training set (d2lzh.data.TRAIN_SIZE)
EDITIONS = {'mxnet': 'MXNet edition (notebooks/)',
            'pytorch': 'PyTorch edition (notebooks/pytorch/)'}
# How the summary recognises kinds of figures by their key (see d2lzh/results.py).
ACCURACY = re.compile(r'acc')
# a figure of two or more devices/processes ('ps_iteration_ms_1_worker' is one process)
TWO_DEVICES = re.compile(r'2dev|2v1|two_device|(?<!\d)(?:[2-9]|\d\d)_?workers?'
                         r'|_a?sync_(?:[2-9]|\d\d)(?!\d)|ddp|(^|_)dp_')


def _fmt(value, unit):
    text = f'{value:.4g}' if isinstance(value, float) else str(value)
    return f'{text}x' if unit == 'x' else f'{text} {unit}'.strip()


def figure_tags(key, fig):
    """The words in brackets after a figure in the summary: what it was measured on."""
    tags = []
    subset, gpus = fig.get('subset'), fig.get('gpus')
    if subset is not None:
        tags.append(f'{"CPU " if gpus == 0 else ""}subset: {subset} of {TRAIN_SIZE} images')
        if ACCURACY.search(key):
            tags.append('accuracy after a few updates: means nothing')
    if TWO_DEVICES.search(key) and gpus is not None and gpus < 2:
        tags.append('2 devices = the same CPU cores' if gpus == 0 else 'only 1 GPU')
    if fig.get('note'):
        tags.append(fig['note'])
    return tags


def load_rows(build):
    """Every notebook run recorded under ``build/run/``: {edition: [row, ...]}."""
    rows = {}
    for path in sorted((build / 'run').glob('*/results/*.json')):
        row = json.loads(path.read_text(encoding='utf-8'))
        rows.setdefault(row['edition'], []).append(row)
    return rows


def _machine_notes(edition, rows):
    """Lines saying what this machine can and cannot show for one edition."""
    figures = [(k, f) for r in rows for k, f in r['figures'].items()]
    gpus = [f['gpus'] for _, f in figures if f.get('gpus') is not None]
    cores = max((r.get('cpu_cores') or 0 for r in rows), default=0)
    subsets = sorted({f['subset'] for _, f in figures if f.get('subset') is not None})
    framework = 'MXNet' if edition == 'mxnet' else 'PyTorch'
    notes = []
    if not gpus:
        notes.append(f'No figure said how many GPUs {framework} could use.')
    elif max(gpus) == 0:
        notes.append(
            f'**No GPU that {framework} could use** ({cores} CPU cores). This machine can show '
            'that every code path runs and how the techniques compare *on this CPU* '
            '(e.g. hybridized vs imperative, synchronous vs asynchronous loops). It cannot show '
            'what a GPU gains: first-copy, allocation, launch and pinned-memory figures are '
            'measured on the CPU standing in for the GPU, and the two "devices" of the '
            'multi-device figures (tagged "2 devices = the same CPU cores") share the same '
            'cores, so their speed-up stays near 1x (a little above where one device alone '
            'leaves a core idle, below where the two fight for them) and says nothing about '
            'two GPUs.')
    elif max(gpus) == 1:
        notes.append(f'**One GPU** that {framework} could use: figures tagged "only 1 GPU" '
                     'did not compare two GPUs (the notebook says what it ran on).')
    else:
        notes.append(f'{max(gpus)} GPUs that {framework} could use: the multi-device figures '
                     'compare real GPUs.')
    if subsets:
        sizes = ' or '.join(str(s) for s in subsets)
        if len(subsets) > 1:
            sizes += ' (each row\'s tag gives its size)'
        notes.append(
            f'Figures tagged "subset" come from training on the first {sizes} of the '
            f'{TRAIN_SIZE} training images (and as many test images; the CPU default, so that '
            'a run finishes in minutes, or `D2LZH_MAX_EXAMPLES`): their accuracies come after a '
            'few updates and are near chance (0.1 for 10 classes), so they say nothing about '
            'the model, and their epoch times are for the subset. The book\'s figures need a GPU or `D2LZH_MAX_EXAMPLES=all`.')
    return notes


def summary_markdown(rows_by_edition):
    """The summary: per edition, a table of notebook, status, wall time, when
    it finished and its figures, then what this machine can and cannot show."""
    lines = ['# make run: summary', '',
             ('Figures measured by the executed notebooks in this folder, one section per '
              'edition. Where an executed notebook\'s prose quotes numbers, it may quote the '
              'stored reference run; the numbers of *this* run are its outputs and this table.')]
    for edition in sorted(rows_by_edition, key=lambda e: list(EDITIONS).index(e)
                          if e in EDITIONS else len(EDITIONS)):
        rows = rows_by_edition[edition]
        lines += ['', f'## {EDITIONS.get(edition, edition)}', '',
                  '| notebook | status | wall time | finished (UTC) | key figures |',
                  '|---|---|---|---|---|']
        for r in rows:
            tagged = [(key, fig, figure_tags(key, fig)) for key, fig in r['figures'].items()]
            # a tag every figure of the notebook has is said once, before them
            common = [t for t in (tagged[0][2] if tagged else [])
                      if len(tagged) > 1 and all(t in tags for _, _, tags in tagged)]
            figures = [f"[all: {'; '.join(common)}]"] if common else []
            for key, fig, tags in tagged:
                tags = [t for t in tags if t not in common]
                figures.append(f"{key} = {_fmt(fig['value'], fig['unit'])}"
                               + (f" [{'; '.join(tags)}]" if tags else ''))
            lines.append(f"| {r['name']} | {r['status']} | {r['seconds']:.0f} s | "
                         f"{r['finished']} | {'; '.join(figures) or '-'} |")
        failed = [r['error'] for r in rows if r['status'] != 'ok']
        if failed:
            lines += [''] + [f'- FAILED: {e}' for e in failed]
        lines += ['', '**What this machine can and cannot show**', '']
        lines += [f'- {n}' for n in _machine_notes(edition, rows)]
    return '\n'.join(lines) + '\n'
