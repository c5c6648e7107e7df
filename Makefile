# The two commands of the README. Everything else is a helper they call.
VENV ?= .venv
PY := $(VENV)/bin/python
ENV ?= babyai
PRESET ?= cpu
RUN ?= demo-$(ENV)
# COMPARE=True also trains fixed-short, fixed-long and adaptive runs at the same budget (four times the time)
COMPARE ?= False
# the demo's item set: BabyAI's one-room levels learn in minutes (TRACK=long: the horizon study's, ~2 h nano build)
TRACK ?= $(if $(filter babyai,$(ENV)),one-room,None)
# BabyAI's demo: 60 steps (stages of 20) and 200 held-out tasks, so that the paired lift's interval is narrow
DEMO_ARGS ?= $(if $(filter babyai,$(ENV)),-p steps 60 -p rounds_every 20 -p eval_items 200,)
export PYTHONHASHSEED := 0

.PHONY: demo test test-long test-fast lab book install model bench gpu-check gpu-wheels clean-outputs strip-notebooks

install:
	bash scripts/install.sh

model: install
	$(PY) -m agentgym_nb.models nano --env $(ENV) --preset $(PRESET) --track $(TRACK)

demo: model
	mkdir -p outputs/runs/$(RUN)
	AGENTGYM_NB_PRESET=$(PRESET) $(VENV)/bin/papermill notebooks/05_scalinginter.ipynb \
		outputs/runs/$(RUN)/05_scalinginter.ipynb -p env $(ENV) -p track $(TRACK) -p run_name $(RUN) -p compare $(COMPARE) $(DEMO_ARGS) \
		--log-output --no-progress-bar
	@echo
	@echo "Results: outputs/runs/$(RUN)/  (summary.json, metrics.jsonl, figures/, rollouts/, executed notebook)"
	@cat outputs/runs/$(RUN)/summary.json

# JupyterLab on the notebooks with the project's kernel (.venv); the URL with its token is printed
lab: install
	$(VENV)/bin/jupyter lab --notebook-dir=notebooks $(if $(filter 0,$(shell id -u)),--allow-root)

# every notebook executed at PRESET (cpu: hours on 2 cores) and rendered with Jupyter Book into docs/_build/html/;
# the run's key figures go to docs/figures/ with the commit and date that made them
book: install
	$(PY) scripts/book.py --preset $(PRESET) --figures

# two pytest-xdist workers, one torch thread each: the browser, JVM, network and install waits of one overlap the
# other's CPU work, and no process oversubscribes the two cores (tests/conftest.py: how the work is split). The
# tests marked `long` (minutes each: a fresh install, expert sweeps, end-to-end studies) are test-long's; CI runs both.
# AGENTGYM_NB_REQUIRE_ALL=1: the full install lacks no package, so a test that would skip for one fails instead
# (tests/harness.py; only a GPU machine's partial install skips them)
XDIST := -n 2 --dist loadgroup --no-loadscope-reorder
test: install
	AGENTGYM_NB_REQUIRE_ALL=1 AGENTGYM_NB_PRESET=smoke OMP_NUM_THREADS=1 $(PY) -m pytest tests --nbmake notebooks --nbmake-timeout=1200 -q -p no:cacheprovider \
		-m "not long" $(XDIST) --durations=25

test-long: install
	AGENTGYM_NB_REQUIRE_ALL=1 AGENTGYM_NB_PRESET=smoke OMP_NUM_THREADS=1 $(PY) -m pytest tests -q -p no:cacheprovider -m long $(XDIST) --durations=10

test-fast: install
	AGENTGYM_NB_REQUIRE_ALL=1 AGENTGYM_NB_PRESET=smoke $(PY) -m pytest tests -q -p no:cacheprovider -m "not slow and not browser and not jvm and not notebook"

# one GPU, no network: the fast tests with CUDA visible, the cpu and gpu presets' RL on the GPU, the engine and training
# benchmarks -> bench/results/gpu_check.json. Where only torch, transformers, peft and accelerate are installed, the
# rest comes from a folder of wheels made beforehand on a machine with the registries (make gpu-wheels)
GPU_PY ?= python3
WHEELS ?= .gpu-wheels
gpu-check:
	$(GPU_PY) scripts/gpu_check.py $(if $(wildcard $(WHEELS)),--wheels $(WHEELS))

gpu-wheels: install
	$(PY) scripts/gpu_wheels.py --out $(WHEELS) --python-version $(or $(GPU_PYTHON_VERSION),3.12)

bench: install
	$(PY) bench/rollout_speed.py

strip-notebooks:
	$(PY) scripts/strip_notebooks.py notebooks/*.ipynb

clean-outputs:
	rm -rf outputs/runs
