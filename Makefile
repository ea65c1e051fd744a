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
# (notebooks/pytorch/*.ipynb; installs PyTorch into .venv) or all. Given only
# NOTEBOOKS, EDITION follows them. Bad values stop make here, before any work.
MXNET_NOTEBOOKS := $(sort $(wildcard notebooks/*.ipynb))
PYTORCH_NOTEBOOKS := $(sort $(wildcard notebooks/pytorch/*.ipynb))
ifeq ($(origin EDITION),undefined)
ifneq ($(filter $(abspath $(PYTORCH_NOTEBOOKS)),$(abspath $(NOTEBOOKS))),)
EDITION := $(if $(filter $(abspath $(MXNET_NOTEBOOKS)),$(abspath $(NOTEBOOKS))),all,pytorch)
endif
endif
EDITION ?= mxnet
ifneq ($(words $(EDITION)) $(filter $(EDITION),mxnet pytorch all),1 $(strip $(EDITION)))
$(error EDITION=$(EDITION) is not valid: use EDITION=mxnet (notebooks/*.ipynb), EDITION=pytorch (notebooks/pytorch/*.ipynb) or EDITION=all)
endif
ifeq ($(EDITION),mxnet)
NOTEBOOKS ?= $(MXNET_NOTEBOOKS)
else ifeq ($(EDITION),pytorch)
NOTEBOOKS ?= $(PYTORCH_NOTEBOOKS)
else
NOTEBOOKS ?= $(MXNET_NOTEBOOKS) $(PYTORCH_NOTEBOOKS)
endif
BAD_NOTEBOOKS := $(patsubst $(CURDIR)/%,%,$(filter-out $(abspath $(MXNET_NOTEBOOKS) $(PYTORCH_NOTEBOOKS)),$(abspath $(NOTEBOOKS))))
ifneq ($(BAD_NOTEBOOKS),)
$(error NOTEBOOKS: $(BAD_NOTEBOOKS) is not a notebook of this project; valid: $(MXNET_NOTEBOOKS) $(PYTORCH_NOTEBOOKS))
endif
ifeq ($(EDITION),mxnet)
TORCH_NOTEBOOKS_GIVEN := $(patsubst $(CURDIR)/%,%,$(filter $(abspath $(PYTORCH_NOTEBOOKS)),$(abspath $(NOTEBOOKS))))
ifneq ($(TORCH_NOTEBOOKS_GIVEN),)
$(error NOTEBOOKS: $(TORCH_NOTEBOOKS_GIVEN) is in the PyTorch edition but EDITION=mxnet: use EDITION=pytorch or EDITION=all)
endif
endif
# Subset used when the tests re-run the notebooks (first N training and N test images).
TEST_MAX_EXAMPLES ?= 256
export PATH := $(abspath $(VENV))/bin:$(PATH)

.PHONY: help venv data run test cloud-test lab html clean distclean

help:
	@echo "EDITION=mxnet (default) | pytorch | all  selects the notebooks of run, test, html"
	@echo "NOTEBOOKS=notebooks/02_hybridize.ipynb ...  only these notebooks"
	@echo "make run    execute the notebooks on real Fashion-MNIST: $(BUILD)/run/<edition>/,"
	@echo "            summary of every run in $(BUILD)/run/summary.md"
	@echo "make test   unit tests of d2lzh + nbval on every notebook"
	@echo "make cloud-test  open notebooks as on Colab: fresh numpy-2 venv, setup cell installs"
	@echo "make lab    JupyterLab on notebooks/ with .venv's python3 kernel"
	@echo "make html   render the stored notebooks, not run, to $(BUILD)/stored/<edition>/"
	@echo "make data   find, install or download Fashion-MNIST and verify it"
	@echo "make venv   create/update .venv from requirements.txt (NUMPY=2: requirements-numpy2.txt)"
	@echo "make clean  remove $(BUILD)/;  make distclean  also remove .venv"
	@echo "make test-gpu-build  mxnet-cu112 + CUDA 11 pip packages against a stub driver (2.2 GB)"
	@echo "make device-bundle   build/device: what the GPU machine of docs/gpu-runs.md lacks"

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
	  $(PY) -m pip install --quiet --disable-pip-version-check "requests>=2.20.0,<3" "graphviz>=0.8.1,<0.9.0"; \
	  if [ "$(MXNET_PACKAGE)" = mxnet-cu112 ]; then \
	    echo "$(PY) -m pip install --target $$($(PY) d2lzh/_cuda11.py target-dir) <CUDA 11 libraries, d2lzh/_cuda11.py>"; \
	    $(PY) -m pip install --quiet --disable-pip-version-check --upgrade --no-deps \
	      --target "$$($(PY) d2lzh/_cuda11.py target-dir)" $$($(PY) d2lzh/_cuda11.py packages); \
	  fi; \
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

# The notebooks declare the kernel `python3`: register .venv's Python under that
# name inside .venv (nothing in ~/.local) and put it first on JUPYTER_PATH, so a
# python3 kernel registered elsewhere cannot shadow it.
lab: venv
	$(PY) -m pip install --quiet --disable-pip-version-check -r requirements-lab.txt
	$(PY) -m ipykernel install --sys-prefix --name python3 --display-name "Python 3 (ipykernel)"
	cd notebooks && JUPYTER_PATH=$(abspath $(VENV))/share/jupyter$${JUPYTER_PATH:+:$$JUPYTER_PATH} \
	  $(abspath $(VENV))/bin/jupyter lab $(if $(filter 0,$(shell id -u)),--allow-root)

# Rendering needs no PyTorch, whatever EDITION says: only .venv's base packages.
html: $(STAMP)
	$(PY) scripts/run_notebooks.py --stored --build $(BUILD) $(NOTEBOOKS)

clean:
	rm -rf $(BUILD)

distclean: clean
	rm -rf $(VENV)

# mxnet-cu112 on a machine without a GPU (issue 8, point 4): builds $(GPU_BUILD_VENV) with
# the GPU build and NVIDIA's CUDA 11 pip packages (about 2.2 GB of downloads, kept in pip's
# cache), then runs tests/test_cuda11.py against a stub NVIDIA driver that it builds with gcc.
# Not part of `make test` (the downloads); see README, "Troubleshooting".
GPU_BUILD_VENV ?= .venv-cu112
.PHONY: test-gpu-build clean-gpu-build
test-gpu-build:
	$(MAKE) --no-print-directory venv VENV=$(GPU_BUILD_VENV) MXNET_PACKAGE=mxnet-cu112 EDITION=mxnet
	D2LZH_REQUIRE_GPU_BUILD=1 $(GPU_BUILD_VENV)/bin/python -m pytest -p no:cacheprovider -q tests/test_cuda11.py
distclean: clean-gpu-build
clean-gpu-build:
	rm -rf $(GPU_BUILD_VENV)

# Everything the rented GPU machine lacks for docs/gpu-runs.md, in $(BUILD)/device (carried
# there with the device tool, under its 64 MiB): that machine has Python $(DEVICE_PY), numpy,
# matplotlib and torch but no package index and no Jupyter. kernel/ holds the Jupyter
# kernel's wheels (installed there with --target, the runtime's own Jupyter); wheels/ is the
# package index the notebooks' setup cell sees (PIP_FIND_LINKS): a d2lzh wheel and the
# small dependencies of d2lzh; data/ the Fashion-MNIST files.
DEVICE_PY ?= 3.12
DEVICE_PLATFORMS := --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
	--platform manylinux2014_x86_64
.PHONY: device-bundle
device-bundle: data
	rm -rf $(BUILD)/device && mkdir -p $(BUILD)/device/kernel $(BUILD)/device/wheels $(BUILD)/device/data
	$(PY) -m pip download --quiet --disable-pip-version-check --only-binary :all: \
	  --python-version $(DEVICE_PY) $(DEVICE_PLATFORMS) -d $(BUILD)/device/kernel \
	  $$(grep -E '^(ipykernel|nbclient)==' requirements-cloud.txt)
	$(PY) -m pip download --quiet --disable-pip-version-check --only-binary :all: --no-deps \
	  --python-version $(DEVICE_PY) $(DEVICE_PLATFORMS) -d $(BUILD)/device/wheels \
	  tqdm psutil setuptools
	$(PY) -m pip wheel --quiet --disable-pip-version-check --no-deps --no-build-isolation \
	  -w $(BUILD)/device/wheels .
	rm -rf d2lzh.egg-info build/lib build/bdist.*  # setuptools' leftovers in this tree
	cp $$($(PY) -c 'import d2lzh.data as d; print(d.find_fashion_mnist(download=False))')/*.gz \
	  $(BUILD)/device/data/
	du -sh $(BUILD)/device/*
