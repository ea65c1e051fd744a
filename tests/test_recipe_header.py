"""The table at the head of d2lzh/torch/recipe.py (issue 48): each technique of d2l.FAST,
where it acts, and FAST without it, every figure read back from the bench JSON it cites."""
import ast
import dataclasses
import json
import re
from pathlib import Path

import pytest

pytest.importorskip('torch')
from d2lzh.torch import recipe, step  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
DOC = ast.get_docstring(ast.parse((ROOT / 'd2lzh/torch/recipe.py').read_text('utf-8')))
ROW = re.compile(r'^(\w+) +([\w.]+) +(recipe_\w+) +([\d,]+) +(never|[\d.]+ s)$', re.M)
ROWS = ROW.findall(DOC)
PROSE = ' '.join(DOC.split())  # the sentences, whatever their line breaks


def configs(name):
    """The configs of ``bench/results/<name>`` (a file named in the docstring)."""
    path = ROOT / 'bench/results' / name
    return json.loads(path.read_text('utf-8'))['configs']


def figures(config):
    """(images/s, seconds to 0.92 or None) of a config, rounded as the table writes them."""
    reached = config['reached_s'] and round(config['reached_s']['mean'], 2)
    return f"{round(config['images_per_s']['mean']):,}", reached


def test_the_table_names_every_technique_of_fast():
    fields = {f.name: f.default for f in dataclasses.fields(recipe.Recipe)}
    changed = {name for name, default in fields.items()
               if getattr(recipe.FAST, name) != default}
    named = [field for field, *_ in ROWS]
    assert len(named) == len(set(named)) == 9 and set(named) <= set(fields)
    # not in the table: a technique's settings (its row names the technique), and what
    # a measurement of it asks for (a target, the start-up timed apart)
    assert changed - set(named) == {'epochs', 'weight_decay', 'lr_warmup',
                                    'momentum', 'target_accuracy', 'time_startup'}


def test_each_row_points_at_code_that_exists():
    for field, where, *_ in ROWS:
        owner, _, attr = where.partition('.')
        found = getattr(recipe, owner, None) or getattr(step, owner)
        assert attr == '' or hasattr(found, attr), where


def test_every_figure_is_the_cited_runs():
    name = re.search(r'bench/results/(\S+-time-to-accuracy\.json)', DOC).group(1)
    runs = configs(name)
    ips, seconds = figures(runs['recipe'])
    spread = runs['recipe']['reached_s']
    assert f'{ips} images/s, 0.92 after {seconds} s' in PROSE
    assert f"{spread['min']:.2f}-{spread['max']:.2f} s" in PROSE
    for field, _, config, ips, reached in ROWS:
        want_ips, want_s = figures(runs[config])
        assert (ips, reached) == (want_ips, 'never' if want_s is None else f'{want_s:.2f} s')
        assert runs[config]['config'] != runs['recipe']['config']
    below = [c for c, e in runs.items() if e['reached_s'] and c != 'recipe'
             and e['reached_s']['mean'] < spread['min']]
    assert sorted(below) == ['recipe_bs256', 'recipe_eval_every_epoch',
                             'recipe_weight_decay_1e-4']  # the sentence after the table
    assert f"weight decay 1e-4 ({figures(runs['recipe_weight_decay_1e-4'])[1]:.2f} s" in PROSE


def test_the_conv_bias_figures_are_the_cited_runs():
    sentence = re.search(r'after ([\d.]+) s against ([\d.]+) s \(the same run.s FAST, '
                         r'\.\.\.-(\S+)\)', PROSE)
    runs = configs('NVIDIA-H100-80GB-HBM3-x1-' + sentence.group(3))
    assert sentence.group(1, 2) == (f"{figures(runs['recipe_no_conv_bias'])[1]:.2f}",
                                    f"{figures(runs['recipe'])[1]:.2f}")
