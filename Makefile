# The two set-up commands of the README:
#   make train   install, fetch the data, train the multitask model on the packaged checkpoint
#   make test    install, lint, run the tests and sanity_check.py, then the numerics tests again
#                on torch's plain CPU kernels (another CPU's rounding: the tolerances must hold)
PYTHON ?= python3
PIP = $(PYTHON) -m pip install --quiet --disable-pip-version-check
TRAIN_ARGS ?=

.PHONY: install install-dev data train test lint

install:
	$(PIP) -r requirements.txt
	$(PIP) --no-deps -r requirements-checkpoint.txt

install-dev: install
	$(PIP) -r requirements-dev.txt

data:
	$(PYTHON) scripts/get_data.py

train: install data
	$(PYTHON) train_multitask.py $(TRAIN_ARGS)

lint: install-dev
	$(PYTHON) -m ruff check .
	$(PYTHON) -m ruff format --check .

test: install-dev data lint
	$(PYTHON) -m pytest -q
	$(PYTHON) sanity_check.py
	ATEN_CPU_CAPABILITY=default $(PYTHON) -m pytest -q -m numerics
	ATEN_CPU_CAPABILITY=default $(PYTHON) sanity_check.py
