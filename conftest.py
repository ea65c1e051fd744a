"""pytest's hooks for every run in this checkout, `make test NOTEBOOKS=...` included (it
collects no file of tests/, so tests/conftest.py would not load): nbval's items get the
project's cell tags and Jupyter's cell names (tests/nbval_tags.py)."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent / 'tests'))
from nbval_tags import pytest_collection_modifyitems  # noqa: E402,F401  (a pytest hook)
