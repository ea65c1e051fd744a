# d2lzh-perf: `make help` lists the targets, README.md the variables; .venv follows the pins.

SHELL := /bin/bash
# The interpreter that builds .venv: the first of these that is Python 3.10 or newer.
PYTHON ?= $(shell for p in python3 python3.12 python3.11 python3.10 python3.13; do \
	command -v $$p >/dev/null 2>&1 && $$p -c 'import sys; sys.exit(sys.version_info[:2] < (3, 10))' \
	2>/dev/null && { echo $$p; break; }; done)
# numpy 1 (requirements.txt) or 2 (requirements-numpy2.txt); Python 3.13 has no numpy 1.x.
NUMPY ?= $(if $(PYTHON),$(shell $(PYTHON) -c 'import sys; print(2 if sys.version_info[:2] >= (3, 13) else 1)' 2>/dev/null || echo 1),1)
REQUIREMENTS := $(if $(filter 1,$(NUMPY)),requirements.txt,requirements-numpy2.txt)
$(if $(filter-out 1 2,$(NUMPY))$(filter-out 1,$(words $(NUMPY))),$(error NUMPY=$(NUMPY) 无效：请用 NUMPY=1 或 NUMPY=2))
VENV ?= .venv
# The MXNet wheel: mxnet (CPU) or mxnet-cu112 (NVIDIA GPUs from Maxwell to Ada, no Hopper).
MXNET_PACKAGE ?= mxnet
PY := $(VENV)/bin/python
PIP := $(PY) -m pip --quiet --disable-pip-version-check
STAMP := $(VENV)/.installed-$(MXNET_PACKAGE)-numpy$(NUMPY)
BUILD ?= build
TEST_MAX_EXAMPLES ?= 128
TEST_JOBS ?= 2
# The unit tests `make test` runs before the notebooks: all of tests/, none when NOTEBOOKS is given.
notebooks_given := $(filter-out undefined,$(origin NOTEBOOKS))
TESTS ?= $(if $(notebooks_given),,tests)

# The variables of this Makefile (README.md); a command-line near miss of one is an error.
VARIABLES := EDITION NOTEBOOKS NUMPY VENV PYTHON MXNET_PACKAGE BUILD TEST_MAX_EXAMPLES TEST_JOBS \
	TESTS D2LZH_MAX_EXAMPLES CLOUD_PYTHON GPU_BUILD_VENV
# They, EDITION and NOTEBOOKS (also bare names: 02_hybridize) checked before any work, the
# notebook list read from d2lzh/project.py: "EDITION PATH..." or "error: one line".
args := $(shell $(or $(PYTHON),python3) scripts/make_args.py --known $(VARIABLES) --given \
	$(foreach v,$(.VARIABLES),$(if $(filter command line,$(origin $v)),'$v')) \
	$(if $(filter-out undefined,$(origin EDITION)),--edition '$(EDITION)') \
	$(if $(notebooks_given),--notebooks $(foreach n,$(NOTEBOOKS),'$n')))
$(if $(filter error:,$(firstword $(args))),$(error $(wordlist 2,$(words $(args)),$(args))))
$(if $(args),,$(error 无法检查命令行：$(or $(PYTHON),python3) scripts/make_args.py 运行失败))
goal_notebooks := $(filter %.ipynb,$(MAKECMDGOALS))
$(if $(goal_notebooks),$(error $(goal_notebooks) 不是 make 的目标：请用 make $(or $(filter-out %.ipynb,$(MAKECMDGOALS)),run) NOTEBOOKS=$(goal_notebooks)))
override EDITION := $(firstword $(args))
override NOTEBOOKS := $(wordlist 2,$(words $(args)),$(args))
export PATH := $(abspath $(VENV))/bin:$(PATH)

.PHONY: help venv data run test test-gpu cloud-test lab lab-reset html clean distclean test-gpu-build

help:  ## 列出这些目标。EDITION=mxnet|pytorch|all、NOTEBOOKS=...：选哪些笔记本；BUILD=DIR：run、html 写到哪里（默认 build）；全部变量见 README.md
	@awk -F':.*## ' '/^[a-z-]+:.*## /{printf "make %-15s %s\n", $$1, $$2}' $(firstword $(MAKEFILE_LIST))

venv: $(if $(filter mxnet,$(EDITION)),$(STAMP),$(VENV)/.installed-torch)  ## 创建或更新 .venv（NUMPY=2：用 numpy 2）

$(VENV)/.installed-torch: $(STAMP) requirements-torch.txt
	$(PIP) install -r requirements-torch.txt
	@touch $@

# The pins but MXNet, then MXNet by the setup cell's installer (--no-deps: it says numpy<2).
$(STAMP): $(REQUIREMENTS) pyproject.toml
	@[ -n "$(PYTHON)" ] || { echo "错误：找不到 Python 3.10 或更新的版本。请安装一个（例如" \
	  "apt-get install python3.11 python3.11-venv），或者用 PYTHON=/path/to/python3.12 指定"; exit 1; }
	@$(PYTHON) -c 'import sys; v = sys.version_info[:2]; sys.exit( \
	  "错误：$(PYTHON) 是 Python %d.%d；d2lzh 需要 3.10 或更新的版本" % v if v < (3, 10) else \
	  "错误：$(PYTHON) 没有 numpy 1.x 的 wheel（Python 3.13+）：请用 NUMPY=2" \
	  if v >= (3, 13) and "$(NUMPY)" == "1" else 0)'
	@[ -x $(PY) ] || { echo "用 $$($(PYTHON) --version) 创建 $(VENV)"; $(PYTHON) -m venv $(VENV) || \
	  { echo "错误：无法创建 $(VENV)。Debian/Ubuntu 上请先 apt-get install python3-venv"; exit 1; }; }
	@rm -f $(VENV)/.installed-mxnet*
	grep -v '^mxnet==' $(REQUIREMENTS) > $(VENV)/requirements-no-mxnet.txt
	$(PIP) install -r $(VENV)/requirements-no-mxnet.txt
	D2LZH_MXNET_PACKAGE=$(MXNET_PACKAGE) $(PY) -m d2lzh.setup.install mxnet
	$(PIP) install --no-deps --no-build-isolation -e .
	@touch $@

# Debian's packages, installed as root where missing: the data (the charts' font is a pip pin)
DEBIAN_PACKAGES := dataset-fashion-mnist
data: venv  ## 找到、安装（Debian 的软件包，需要 root）或下载 Fashion-MNIST，并校验它
	@missing=$$(for p in $(DEBIAN_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	[ -z "$$missing" ] || { command -v apt-get >/dev/null && [ "$$(id -u)" = 0 ] && \
	  echo "正在安装 $$missing" && { apt-get install -y -q $$missing || { apt-get update -q && \
	  apt-get install -y -q $$missing; }; } >/dev/null 2>&1; } || \
	  echo "没有安装 $$missing（加载数据时会改为下载）"
	$(PY) -m d2lzh.data

run: data  ## 执行笔记本，结果写到 build/run/<edition>/；汇总和图表：build/run/summary.{md,png,html}
	$(PY) scripts/run_notebooks.py --build $(BUILD) $(NOTEBOOKS)

# Temporary files (pytest's, kernels', torch's) and d2l.output_dir() go into one folder, removed after.
# OMP_WAIT_POLICY=PASSIVE: waiting OpenMP threads sleep, not spin on the other test process's cores.
test: data  ## d2lzh 的单元测试，再用 nbval 检查笔记本
	scratch=$$(mktemp -d -t d2lzh-test.XXXXXX) && trap 'rm -rf "$$scratch"' EXIT && \
	TMPDIR=$$scratch D2LZH_OUTPUT_DIR=$$scratch/output OMP_WAIT_POLICY=PASSIVE \
	D2LZH_MAX_EXAMPLES=$${D2LZH_MAX_EXAMPLES:-$(TEST_MAX_EXAMPLES)} $(PY) -m pytest \
	  --nbval --nbval-current-env --nbval-sanitize-with tests/nbval_sanitize.cfg \
	  -n $(TEST_JOBS) --dist loadfile -p no:cacheprovider $(strip $(TESTS) $(NOTEBOOKS))

# The GPU check: nbval on the PyTorch notebooks on this machine's GPUs, each on as many GPUs as
# stored it, all the data (scripts/gpu_check.py); one that needs more GPUs is skipped.
test-gpu: venv  ## 在这台机器的 GPU 上用 nbval 检查 PyTorch 版笔记本（或 NOTEBOOKS）；MXNet 版的 NOTEBOOKS 在 CPU 上检查，数据量与存储输出的那次运行相同
	$(PY) scripts/gpu_check.py $(if $(notebooks_given),$(NOTEBOOKS),$(filter notebooks/pytorch/%,$(NOTEBOOKS)))

CLOUD_PYTHON ?= $(PYTHON)
cloud-test: data  ## 像在 Colab 上那样单独打开笔记本：全新的 numpy 2 venv，没有 d2lzh，没有 MXNet
	$(PYTHON) scripts/cloud_runtime.py --python $(CLOUD_PYTHON) --build $(BUILD)/cloud

# JupyterLab on working copies in build/lab/notebooks/ (scripts/lab.py), never on notebooks/,
# with the data found or downloaded first, as for run; the kernel `python3`: .venv's,
# registered inside .venv, first on JUPYTER_PATH.
lab: data  ## 在你自己的笔记本副本上开 JupyterLab（副本只在第一次时复制到 build/lab/notebooks/）
	$(PIP) install -r requirements-lab.txt
	@# ipykernel writes the kernel spec into a temporary folder it does not remove: give it one we remove
	tmp=$$(mktemp -d) && TMPDIR=$$tmp $(PY) -m ipykernel install --sys-prefix --name python3 \
	  --display-name "Python 3 (ipykernel)"; status=$$?; rm -rf "$$tmp"; exit $$status
	$(PY) scripts/lab.py --dest $(BUILD)/lab
	cd $(BUILD)/lab/notebooks && JUPYTER_PATH=$(abspath $(VENV))/share/jupyter$${JUPYTER_PATH:+:$$JUPYTER_PATH} \
	  $(abspath $(VENV))/bin/jupyter lab $(if $(filter 0,$(shell id -u)),--allow-root)

lab-reset:  ## 把 lab 里 NOTEBOOKS（或 EDITION 的笔记本）的副本换成新的，旧副本保留在 build/lab/previous/
	$(or $(PYTHON),python3) scripts/lab.py --dest $(BUILD)/lab --reset $(NOTEBOOKS)

html: $(STAMP)  ## 不运行，把存储的笔记本渲染到 build/stored/<edition>/（不需要 PyTorch）
	$(PY) scripts/run_notebooks.py --stored --build $(BUILD) $(NOTEBOOKS)

GPU_BUILD_VENV ?= .venv-cu112
test-gpu-build:  ## 用一个模拟的 NVIDIA 驱动（stub）检查 mxnet-cu112 和 CUDA 11 的 pip 包（2.2 GB）
	$(MAKE) --no-print-directory venv VENV=$(GPU_BUILD_VENV) MXNET_PACKAGE=mxnet-cu112 EDITION=mxnet
	D2LZH_REQUIRE_GPU_BUILD=1 $(GPU_BUILD_VENV)/bin/python -m pytest -p no:cacheprovider -q tests/test_cuda11.py

clean:  ## 删除 build/（或 BUILD=DIR），但保留 build/lab/，即你的笔记本副本
	[ ! -d $(BUILD) ] || find $(BUILD) -mindepth 1 -maxdepth 1 ! -name lab -exec rm -rf {} +

distclean: clean  ## 另外删除各个 venv
	rm -rf $(VENV) $(GPU_BUILD_VENV)
