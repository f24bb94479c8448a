# Two commands do everything: `make run` (set-up + the whole notebook suite on the default profile)
# and `make test` (set-up + the tests). Set-up is cached (see lab/setup.py) and skips finished steps.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
PROFILE ?= cpu-default
# Extra arguments for `lab run`, e.g. make run ARGS="--only 01,02"
ARGS ?=
# JupyterLab listens on loopback only; the token is printed in its start-up log.
LAB_PORT ?= 8888

.PHONY: setup run test lab validate plan clean help

help:
	@echo "make run   - set up (cached) and run all notebooks on PROFILE=$(PROFILE); prints the report path"
	@echo "make test  - set up (cached) and run the tests"
	@echo "make lab   - JupyterLab on 127.0.0.1:$(LAB_PORT) with the lab's kernel"
	@echo "make clean - remove .venv (the cache in \$${LAB_CACHE:-~/.cache/llm-lab} stays)"

setup:
	@$(PYTHON) -m lab.setup

run: setup
	$(PY) -m lab run --profile $(PROFILE) $(ARGS)

test: setup
	$(PY) -m pytest -q -ra $(ARGS)

lab: setup
	$(PY) -m jupyter lab --no-browser --ip 127.0.0.1 --port $(LAB_PORT) --notebook-dir notebooks \
		$$( [ "$$(id -u)" = 0 ] && echo --allow-root )

validate: setup
	$(PY) -m lab validate params/*.yaml

plan: setup
	$(PY) -m lab plan $(PROFILE) --json

clean:
	rm -rf $(VENV)
