"""scripts/store_outputs.py: a run's outputs go into the stored notebook, nothing else does."""
import sys
from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / 'scripts'))
import store_outputs  # noqa: E402


def _pair(tmp_path, executed_source='print(1)'):
    stored = new_notebook(cells=[new_markdown_cell('[术语](../docs/glossary.md)'),
                                 new_code_cell('print(1)')])
    run = new_notebook(cells=[new_markdown_cell('[术语](../../../docs/glossary.md)'),
                              new_code_cell(executed_source, execution_count=1, outputs=[
                                  new_output('stream', name='stdout', text='1\n')])])
    (tmp_path / 'notebooks' / 'pytorch').mkdir(parents=True)
    (tmp_path / 'run' / 'pytorch').mkdir(parents=True)
    nbformat.write(stored, tmp_path / 'notebooks' / 'pytorch' / 'a.ipynb')
    nbformat.write(run, tmp_path / 'run' / 'pytorch' / 'a.ipynb')
    return tmp_path / 'run' / 'pytorch' / 'a.ipynb', tmp_path / 'notebooks' / 'pytorch' / 'a.ipynb'


def test_outputs_are_stored_and_the_markdown_stays(tmp_path, capsys):
    executed, stored = _pair(tmp_path)
    assert store_outputs.main([str(executed), '--into', str(tmp_path / 'notebooks')]) == 0
    nb = nbformat.read(stored, as_version=4)
    assert nb.cells[0].source == '[术语](../docs/glossary.md)'  # not the executed copy's link
    assert nb.cells[1].outputs[0].text == '1\n' and nb.cells[1].execution_count == 1
    assert '存入了' in capsys.readouterr().out


def test_a_run_of_other_code_changes_nothing(tmp_path, capsys):
    executed, stored = _pair(tmp_path, executed_source='print(2)')
    before = stored.read_text()
    assert store_outputs.main([str(executed), '--into', str(tmp_path / 'notebooks')]) == 2
    assert stored.read_text() == before
    assert '运行的代码与' in capsys.readouterr().err
