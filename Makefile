# Two commands on a fresh clone: `make demo` and `make test`. Each creates .venv when missing,
# installs torch==2.13.0 first and then torchloom. `make docs` builds the documentation site.
# Plain pip chooses the torch build (on Linux from PyPI, a CUDA one); TORCH_INDEX picks an index,
# e.g. `make install TORCH_INDEX=https://download.pytorch.org/whl/cpu`. It is empty by default so
# that a machine whose pip finds a local wheel (as this project's does) installs offline.
TORCH_INDEX ?=
TORCH_FROM := $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX),)
VENV := .venv
PYTHON := $(VENV)/bin/python
STAMP := $(VENV)/.torchloom-installed

.PHONY: install demo test lint docs bench clean

$(PYTHON):
	python3 -m venv $(VENV)

$(STAMP): pyproject.toml | $(PYTHON)
	$(PYTHON) -m pip install -q $(TORCH_FROM) torch==2.13.0
	$(PYTHON) -m pip install -q -e '.[all,dev,docs]'
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/torchloom demo

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests benchmarks examples docs
	$(VENV)/bin/mypy

# The documentation site, into docs/_build/html. Strict: a warning (a docstring that does not
# render, a reference to nothing) fails it; -E re-reads every page, so no warning hides in a cache.
docs: $(STAMP)
	$(VENV)/bin/sphinx-build -W --keep-going -n -E -q -b html docs docs/_build/html

# tests/test_docs.py checks the build just made instead of making its own. Two pytest-xdist
# workers: much of the suite waits (subprocess ranks, the S3 server, its proxy's latency), so two
# halve the wall time on CI's 2 cores (each worker starts its own S3 server).
test: lint docs
	TORCHLOOM_DOCS_HTML=docs/_build/html $(VENV)/bin/pytest -q -n 2

# LitData pulls torchvision (only a CUDA build works here) and downgrades python-dateutil, so it
# lives in a venv of its own that benchmarks/peers_bench.py calls by subprocess.
PEERS := .venv-peers/.installed

$(PEERS):
	python3 -m venv .venv-peers
	.venv-peers/bin/pip install -q $(TORCH_FROM) torch==2.13.0
	echo torch==2.13.0 > .venv-peers/constraints.txt
	.venv-peers/bin/pip install -q -c .venv-peers/constraints.txt litdata
	touch $(PEERS)

bench: $(STAMP) $(PEERS)
	$(PYTHON) -m pip install -q -e '.[bench,peers]'
	$(PYTHON) -m benchmarks.run --out BENCHMARKS.md

clean:
	rm -rf $(VENV) build src/*.egg-info docs/_build docs/reference
