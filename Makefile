# The two set-up commands of the README:
#   make train   install, fetch the data, train the multitask model on the packaged checkpoint
#   make test    install, lint, run every test (in parallel, pytest-xdist over the machine's
#                cores) and sanity_check.py, then the numerics tests again on torch's plain CPU
#                kernels (another CPU's rounding: the tolerances must hold); what CI runs
# and a developer's inner loop:
#   make check   lint and the fast tier (every test not marked slow: the top-level conftest.py
#                says which), in parallel; under two minutes on 2 cores
# and the environment the AdapterHub export test loads its folders in:
#   make adapters-env   .venv-adapters: the adapters library beside an older transformers than
#                       the project's (tests/driver/test_adapters_export.py), torch from the
#                       project's environment
#
# Where PYTHON is already a virtual environment (sys.prefix != sys.base_prefix: an activated
# venv), everything installs into and runs with it. Anywhere else (a system Python, which may
# refuse pip under PEP 668, pyenv's, conda's base) the project environment .venv is made from
# PYTHON and used instead. The first line make prints says which.
PYTHON ?= python3
VENV = .venv
ADAPTERS_VENV = .venv-adapters
ADAPTERS_PINS = transformers==4.57.6 adapters==1.3.0 "huggingface_hub<1.0"
TRAIN_ARGS ?=

# PYTHON must be one word (make splits at spaces) naming a Python 3.10+.
ifeq ($(strip $(PYTHON)),)
$(error PYTHON is empty: name a Python 3.10+, e.g. make install PYTHON=python3.11)
endif
ifneq ($(words $(PYTHON)),1)
$(error PYTHON=$(PYTHON) holds a space, which make cannot pass on: name a path without one, \
e.g. a link to that Python)
endif

# One look at PYTHON (any Python, 2.7 too): "active X.Y ok PREFIX" for a virtual environment, else
# "base X.Y ok EXECUTABLE"; "old" in place of "ok" for a Python before 3.10.
PROBE := $(shell $(PYTHON) -c 'import sys; v = sys.version_info; \
  active = sys.prefix != getattr(sys, "base_prefix", sys.prefix); \
  sys.stdout.write(" ".join(["active" if active else "base", "%d.%d" % tuple(v[:2]), \
  "ok" if tuple(v[:2]) >= (3, 10) else "old", sys.prefix if active else sys.executable]) + "\n")' \
  2>/dev/null)
WHERE = $(wordlist 4,$(words $(PROBE)),$(PROBE))
ifeq ($(word 3,$(PROBE)),old)
$(error PYTHON=$(PYTHON) is Python $(word 2,$(PROBE)); the project needs Python 3.10 or newer: \
name one, e.g. make install PYTHON=python3.11)
endif
ifeq ($(firstword $(PROBE)),active)
ENV_PYTHON = $(PYTHON)
ENV_MADE =
$(info using the active environment $(WHERE))
else ifeq ($(firstword $(PROBE)),base)
ENV_PYTHON = $(VENV)/bin/python
ENV_MADE = $(VENV)/.made
BASE_VERSION = $(word 2,$(PROBE))
# A made .venv is kept only where it still runs and is of PYTHON's version (pyvenv.cfg says).
ifneq ($(wildcard $(VENV)/.made),)
ifeq ($(shell test -L $(VENV)/bin/python && test ! -e $(VENV)/bin/python && echo gone),gone)
$(error $(VENV)/bin/python is a broken link: the Python $(VENV) was made from is gone; remove \
$(VENV) (rm -rf $(VENV)) and run make again to make it anew from PYTHON=$(PYTHON))
endif
VENV_VERSION := $(firstword $(shell sed -n 's/^version[_a-z]* *= *\([0-9]*\.[0-9]*\).*/\1/p' \
  $(VENV)/pyvenv.cfg 2>/dev/null))
ifneq ($(filter-out $(BASE_VERSION),$(VENV_VERSION)),)
$(error the $(VENV) was made with Python $(VENV_VERSION), not PYTHON=$(PYTHON)'s $(BASE_VERSION); \
remove it (rm -rf $(VENV)) or pass PYTHON=python$(VENV_VERSION))
endif
endif
$(info using the project environment $(VENV) (made from $(WHERE)))
else
$(error cannot run PYTHON=$(PYTHON): name a Python 3.10+, e.g. make test PYTHON=python3.11)
endif

# The environments are made readable by every user whatever the umask: the class grader's runners
# (users of their own) run Python from .venv, which a umask of 077 would close to them.
OPEN_TO_ALL = umask 022 &&
PIP = $(OPEN_TO_ALL) $(ENV_PYTHON) -m pip install --quiet --disable-pip-version-check

.PHONY: install install-dev data train test check lint adapters-env

# The project environment, made once (the stamp file); a half-made one is removed and made again.
# Debian and Ubuntu ship venv's ensurepip apart from Python (python3.X-venv): without it, the
# environment is made without pip and PYTHON's own pip (python3-pip) puts pip in it; with
# neither, say what to install.
$(VENV)/.made:
	rm -rf $(VENV)
	@$(OPEN_TO_ALL) if $(PYTHON) -c 'import ensurepip' 2>/dev/null; then \
	    $(PYTHON) -m venv $(VENV); \
	elif $(PYTHON) -m pip --version >/dev/null 2>&1; then \
	    echo "$(PYTHON) has no ensurepip: $(VENV) made without pip, then given pip by $(PYTHON)'s"; \
	    $(PYTHON) -m venv --without-pip $(VENV) && \
	    $(PYTHON) -m pip --python $(VENV)/bin/python install --quiet pip; \
	else \
	    echo "cannot make $(VENV): $(PYTHON) has no venv/ensurepip and no pip; install one \
	(Debian/Ubuntu: sudo apt install python$(BASE_VERSION)-venv, or python3-venv), then run \
	make again" >&2; false; \
	fi || { rm -rf $(VENV); exit 1; }
	touch $@

install: $(ENV_MADE)
	$(PIP) -r requirements.txt
	$(PIP) --no-deps -r requirements-checkpoint.txt

# requirements-lab.txt: what the lab's tests need beyond the student tree's requirements-dev.txt
install-dev: install
	$(PIP) -r requirements-dev.txt -r requirements-lab.txt

data: $(ENV_MADE)
	$(ENV_PYTHON) scripts/get_data.py

train: install data
	$(ENV_PYTHON) train_multitask.py $(TRAIN_ARGS)

lint: install-dev
	$(ENV_PYTHON) -m ruff check .
	$(ENV_PYTHON) -m ruff format --check .

# Built once (the stamp file), again when this Makefile (its pins) or the project environment
# changes; a half-built environment is removed and built again. Its own site-packages come first
# (the older transformers); a .pth file then adds the project environment's site-packages, so
# torch and the rest come from there: a venv's --system-site-packages would give the base
# Python's, which may have no torch.
adapters-env: $(ADAPTERS_VENV)/.built

$(ADAPTERS_VENV)/.built: Makefile $(ENV_MADE) | install
	rm -rf $(ADAPTERS_VENV)
	$(OPEN_TO_ALL) $(ENV_PYTHON) -m venv $(ADAPTERS_VENV)
	$(OPEN_TO_ALL) $(ENV_PYTHON) -c 'import site; print(*site.getsitepackages(), sep="\n")' \
	  > "$$($(ADAPTERS_VENV)/bin/python -c 'import site; print(site.getsitepackages()[0])')/project-env.pth"
	$(OPEN_TO_ALL) $(ADAPTERS_VENV)/bin/python -m pip install --quiet --disable-pip-version-check $(ADAPTERS_PINS)
	$(ADAPTERS_VENV)/bin/python -c "import torch, adapters, transformers"
	touch $@

# --dist loadgroup: the class graders' test files share one worker (conftest.py's GRADER_FILES)
PARALLEL = -n auto --dist loadgroup

check: install-dev data lint
	$(ENV_PYTHON) -m pytest -q -m "not slow" $(PARALLEL)

test: install-dev data lint adapters-env
	$(ENV_PYTHON) -m pytest -q $(PARALLEL)
	$(ENV_PYTHON) sanity_check.py
	ATEN_CPU_CAPABILITY=default $(ENV_PYTHON) -m pytest -q -m numerics $(PARALLEL)
	ATEN_CPU_CAPABILITY=default $(ENV_PYTHON) sanity_check.py
