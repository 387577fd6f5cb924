# Quick start: `make demo` (a short ResNet-50 run on real images) and `make test`.
# Both install what is missing first (scripts/install_deps.sh; quick when nothing is).
PYTHON ?= python3
PYTEST_ARGS ?=
export PYTHON

.PHONY: deps demo demo-ssd test test-slow benchmark clean

deps:
	bash scripts/install_deps.sh

demo: deps
	bash resnet50v1.5/scripts/demo.sh

# SSD320 on a generated detection dataset: about 4 minutes on 2 cores, PNGs of its detections.
demo-ssd: deps
	bash ssd320/scripts/demo.sh

test: deps
	$(PYTHON) -m pytest tests -m "not slow" $(PYTEST_ARGS)

# Learning curves and other runs that take minutes each; not part of `make test`.
test-slow: deps
	$(PYTHON) -m pytest tests -m slow $(PYTEST_ARGS)

clean:
	rm -rf results demo_data .pytest_cache
