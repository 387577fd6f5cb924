# Quick start: `make demo` (a short ResNet-50 run on real images) and `make test`.
# Both install what is missing first (scripts/install_deps.sh; quick when nothing is).
PYTHON ?= python3
PYTEST_ARGS ?=
# Which stack's suite this is: tests marked one_stack run in one of the two (pytest.ini).
TEST_STACK ?= pip
export PYTHON TEST_STACK

# The replica of NGC 25.02's Python stack (scripts/ngc_stack.sh), kept between runs.
NGC_VENV ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/tf-model-scripts/venvs/ngc-25.02
# Runs a target with the replica's python, pip console scripts (horovodrun, tfrecord2idx) first.
# The environments apart (scripts/modelopt_env.sh, scripts/triton_env.sh, tests/torch_env.sh)
# are made with the machine's python3 whichever stack runs the suite: one of each, not one per
# stack.
BASE_PYTHON := $(shell command -v python3)
NGC_MAKE = MODELOPT_BASE_PYTHON="$(BASE_PYTHON)" TRITON_PYTHON="$(BASE_PYTHON)" TORCH_PYTHON="$(BASE_PYTHON)" \
	PATH="$(NGC_VENV)/bin:$$PATH" VIRTUAL_ENV="$(NGC_VENV)" $(MAKE) PYTHON="$(NGC_VENV)/bin/python" \
	TEST_STACK=ngc

.PHONY: deps test-deps side-envs deps-all pip-test-deps ngc-test-deps demo demo-ssd test test-slow lint \
	pytest-fast pytest-slow ngc-stack ngc-deps test-ngc test-slow-ngc clean

deps:
	bash scripts/install_deps.sh

# What only the tests need: tf-slim (in $(PYTHON)'s environment), PyTorch (tests/torch_env.sh)
# and a real Slurm (slurm-wlm, munge) that tests/test_slurm.py starts.
test-deps:
	bash scripts/install_test_deps.sh

# The environments apart from TensorFlow's that test-deps makes (PyTorch with Model Optimizer,
# PyTriton), on their own: they need nothing of either stack.
side-envs:
	bash tests/torch_env.sh >/dev/null
	bash scripts/triton_env.sh >/dev/null

# Every install of both suites, side by side: the pip stack then its test packages, the side
# environments, the NGC replica then its test packages (.ci/run, on a fresh machine). They are
# mostly downloads, unpacking and single-threaded pip: one after another they took 18 minutes
# with 1.2 of the 2 cores busy on average (docs/testing.md). Jobs that share a resource take
# turns: an environment (side_env.sh's lock), apt, the editable install (install_deps.sh's).
deps-all:
	$(MAKE) -j3 --output-sync=target pip-test-deps side-envs ngc-test-deps

pip-test-deps: deps
	$(MAKE) test-deps

demo: deps
	bash resnet50v1.5/scripts/demo.sh

# SSD320 on a generated detection dataset: about 4 minutes on 2 cores, PNGs of its detections.
demo-ssd: deps
	bash ssd320/scripts/demo.sh

# The linter (ruff, configured in pyproject.toml), then the suite.
test: pip-test-deps
	$(MAKE) lint pytest-fast

# Learning curves and other runs that take minutes each; not part of `make test`. The runs are
# kept in $(LEARNING_RUNS)/MODEL for the report: python -m benchtools.report (see README).
LEARNING_RUNS ?= results/learning
test-slow: deps
	$(MAKE) pytest-slow

lint:
	$(PYTHON) -m ruff check .

# The suites without the install step, for targets that have just run it. The fast one on
# TEST_WORKERS pytest-xdist workers (0: in this process): most of its time is main.py processes
# starting, which leave a core idle. --dist loadfile: a test file's tests share one worker, so that
# its module fixtures (exports, servers, reference runs) are made once; split over two workers,
# each worker made its own (--dist loadgroup grouped nothing under pytest 9.2 with xdist 3.8).
# --no-loadscope-reorder: the files in conftest.py's order, the slowest first (tests/durations.py).
TEST_WORKERS ?= 2
pytest-fast:
	$(PYTHON) -m pytest tests -m "not slow" -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder \
		$(PYTEST_ARGS)

pytest-slow:
	$(PYTHON) -m pytest tests -m slow --keep_runs $(LEARNING_RUNS) $(PYTEST_ARGS)

# The same two suites on the NGC 25.02 container's stack: the stock image's packages, then
# scripts/install_deps.sh over them exactly as the Dockerfile runs it.
ngc-stack:
	bash scripts/ngc_stack.sh "$(NGC_VENV)"

# With the image's pins in PIP_CONSTRAINT, as NGC containers may set them (Keras 3.3.2 among
# them: install_deps.sh lifts that one pin and says so).
ngc-deps: ngc-stack
	+PIP_CONSTRAINT="$(NGC_VENV)/pip-constraint.txt" $(NGC_MAKE) deps
	bash scripts/ngc_stack.sh --check "$(NGC_VENV)"

ngc-test-deps: ngc-deps
	+$(NGC_MAKE) test-deps

test-ngc: ngc-test-deps
	+$(NGC_MAKE) lint pytest-fast

test-slow-ngc: ngc-deps
	$(NGC_MAKE) LEARNING_RUNS=results/learning-ngc pytest-slow

clean:
	rm -rf results demo_data .pytest_cache
