# d2lzh-perf: run and test the chapter notebooks. `make help` lists the targets.
# Every target that needs Python first creates or updates the project's own
# virtual environment (.venv) from the pinned requirements.

SHELL := /bin/bash
# The interpreter that builds .venv: the first of these that is Python 3.10 or newer.
# Override with `make run PYTHON=python3.11`.
PYTHON ?= $(shell for p in python3 python3.12 python3.11 python3.10 python3.13; do \
	command -v $$p >/dev/null 2>&1 && $$p -c 'import sys; sys.exit(not sys.version_info[:2] >= (3, 10))' 2>/dev/null \
	&& { echo $$p; break; }; done)
# numpy 1 (requirements.txt, the default) or 2 (requirements-numpy2.txt, what cloud notebooks
# ship; MXNet is then installed with --no-deps, see README). Python 3.13 has no numpy 1.x,
# so there it is 2. CI also tests NUMPY=2 in a venv of its own: `make test NUMPY=2 VENV=.venv-numpy2`.
NUMPY ?= $(shell $(PYTHON) -c 'import sys; print(2 if sys.version_info[:2] >= (3, 13) else 1)' 2>/dev/null || echo 1)
ifeq ($(NUMPY),2)
REQUIREMENTS := requirements-numpy2.txt
else ifeq ($(NUMPY),1)
REQUIREMENTS := requirements.txt
else
$(error NUMPY=$(NUMPY) is not valid: use 1 or 2)
endif
VENV ?= .venv
# The MXNet wheel: `mxnet` (CPU, the default) or `mxnet-cu112` (NVIDIA GPUs from
# Maxwell to Ada, CUDA 11.2 and the NVIDIA driver needed; no Hopper support).
MXNET_PACKAGE ?= mxnet
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(MXNET_PACKAGE)-numpy$(NUMPY)
BUILD ?= build
# Which notebooks: mxnet (notebooks/*.ipynb, the default), pytorch
# (notebooks/pytorch/*.ipynb; installs PyTorch into .venv) or all.
EDITION ?= mxnet
MXNET_NOTEBOOKS := $(sort $(wildcard notebooks/*.ipynb))
PYTORCH_NOTEBOOKS := $(sort $(wildcard notebooks/pytorch/*.ipynb))
ifeq ($(EDITION),mxnet)
NOTEBOOKS ?= $(MXNET_NOTEBOOKS)
else ifeq ($(EDITION),pytorch)
NOTEBOOKS ?= $(PYTORCH_NOTEBOOKS)
else ifeq ($(EDITION),all)
NOTEBOOKS ?= $(MXNET_NOTEBOOKS) $(PYTORCH_NOTEBOOKS)
else
$(error EDITION=$(EDITION) is not valid: use mxnet, pytorch or all)
endif
# Subset used when the tests re-run the notebooks (first N training and N test images).
TEST_MAX_EXAMPLES ?= 256
export PATH := $(abspath $(VENV))/bin:$(PATH)

.PHONY: help venv data run test cloud-test lab html clean distclean

help:
	@echo "EDITION=mxnet (default) | pytorch | all  selects the notebooks of run, test, html"
	@echo "make run    execute every notebook on real Fashion-MNIST; results in $(BUILD)/"
	@echo "make test   unit tests of d2lzh + nbval on every notebook"
	@echo "make cloud-test  open notebooks as on Colab: fresh numpy-2 venv, setup cell installs"
	@echo "make lab    JupyterLab on notebooks/ with the project's kernel"
	@echo "make html   render the stored notebooks to $(BUILD)/html without running them"
	@echo "make data   find, install or download Fashion-MNIST and verify it"
	@echo "make venv   create/update .venv from requirements.txt (NUMPY=2: requirements-numpy2.txt)"
	@echo "make clean  remove $(BUILD)/;  make distclean  also remove .venv"

ifeq ($(EDITION),mxnet)
venv: $(STAMP)
else
venv: $(VENV)/.installed-torch
endif

# PyTorch (optional extra): CPU build on machines without CUDA, see README.
$(VENV)/.installed-torch: $(STAMP) requirements-torch.txt
	$(PY) -m pip install --quiet --disable-pip-version-check -r requirements-torch.txt
	@touch $@

$(STAMP): $(REQUIREMENTS) pyproject.toml
	@if [ -z "$(PYTHON)" ]; then \
	  echo "error: no Python 3.10 or newer found."; \
	  echo "Install one (e.g. apt-get install python3.11 python3.11-venv) or pass PYTHON=/path/to/python3.12"; \
	  exit 1; fi
	@$(PYTHON) -c 'import sys; v = sys.version_info[:2]; sys.exit(0 if v >= (3, 10) else \
	  "error: $(PYTHON) is Python %d.%d; d2lzh needs 3.10 or newer" % v)'
	@if [ "$(NUMPY)" = 1 ] && ! $(PYTHON) -c 'import sys; sys.exit(sys.version_info[:2] >= (3, 13))'; then \
	  echo "error: $(PYTHON) has no numpy 1.x wheels (Python 3.13+): use NUMPY=2"; exit 1; fi
	@if [ ! -x $(PY) ]; then \
	  echo "creating $(VENV) with $$($(PYTHON) --version)"; \
	  $(PYTHON) -m venv $(VENV) || { echo "error: could not create $(VENV). On Debian/Ubuntu: apt-get install python3-venv"; exit 1; }; \
	fi
	@rm -f $(VENV)/.installed-mxnet*
	@if [ "$(MXNET_PACKAGE)" = mxnet ] && [ "$(NUMPY)" = 1 ]; then \
	  $(PY) -m pip uninstall --quiet --yes mxnet-cu112 2>/dev/null || true; \
	  echo "$(PY) -m pip install -r requirements.txt"; \
	  $(PY) -m pip install --quiet --disable-pip-version-check -r requirements.txt; \
	else \
	  grep -v '^mxnet==' $(REQUIREMENTS) > $(VENV)/requirements-no-mxnet.txt; \
	  echo "$(PY) -m pip install -r $(REQUIREMENTS)"; \
	  $(PY) -m pip install --quiet --disable-pip-version-check -r $(VENV)/requirements-no-mxnet.txt; \
	  for other in mxnet mxnet-cu112; do [ $$other = "$(MXNET_PACKAGE)" ] || \
	    $(PY) -m pip uninstall --quiet --yes $$other 2>/dev/null || true; done; \
	  echo "$(PY) -m pip install --no-deps $(MXNET_PACKAGE)==1.9.1   (its metadata says numpy<2; d2lzh makes it work)"; \
	  $(PY) -m pip install --quiet --disable-pip-version-check --force-reinstall --no-deps "$(MXNET_PACKAGE)==1.9.1"; \
	fi
	$(PY) -m pip install --quiet --disable-pip-version-check --no-deps --no-build-isolation -e .
	@touch $(STAMP)

data: venv
	@if $(PY) -c 'import d2lzh.data as d; d.find_fashion_mnist(download=False)' >/dev/null 2>&1; then :; \
	elif command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" = 0 ]; then \
	  echo "installing Debian's package dataset-fashion-mnist"; \
	  apt-get install -y -q dataset-fashion-mnist >/dev/null 2>&1 || \
	  { apt-get update -q >/dev/null && apt-get install -y -q dataset-fashion-mnist >/dev/null; } || \
	  echo "apt-get could not install it; the loader will download the data"; \
	fi
	$(PY) -m d2lzh.data

run: data
	$(PY) scripts/run_notebooks.py --build $(BUILD) $(NOTEBOOKS)

test: data
	D2LZH_MAX_EXAMPLES=$${D2LZH_MAX_EXAMPLES:-$(TEST_MAX_EXAMPLES)} $(PY) -m pytest \
	  --nbval --nbval-current-env --nbval-sanitize-with tests/nbval_sanitize.cfg \
	  -p no:cacheprovider tests $(NOTEBOOKS)

# A simulated cloud notebook runtime (fresh venv: numpy 2, Jupyter kernel, matplotlib, CPU
# torch; no d2lzh, no MXNet) opens one notebook of each edition alone, through its setup cell.
CLOUD_PYTHON ?= $(PYTHON)
cloud-test: data
	$(PYTHON) scripts/cloud_runtime.py --python $(CLOUD_PYTHON) --build $(BUILD)/cloud

lab: venv
	$(PY) -m pip install --quiet --disable-pip-version-check -r requirements-lab.txt
	$(PY) -m ipykernel install --user --name d2lzh-perf --display-name "Python (d2lzh-perf)"
	cd notebooks && $(abspath $(VENV))/bin/jupyter lab $(if $(filter 0,$(shell id -u)),--allow-root)

html: venv
	@mkdir -p $(BUILD)/html
	$(PY) -m jupyter nbconvert --to html --output-dir $(BUILD)/html $(NOTEBOOKS)

clean:
	rm -rf $(BUILD)

distclean: clean
	rm -rf $(VENV)
