# Both targets create and use a local virtual environment by themselves.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test test-deep specs specs-deep bench bench-audit bench-repair chaos clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test,audit]'
	touch $(STAMP)

demo: $(STAMP)
	$(PY) -m replicaset.cli demo

test: $(STAMP)
	$(PY) -m pytest -q

test-deep: $(STAMP)
	$(PY) -m pytest -q -m deep

specs: $(STAMP)
	$(PY) specs/run_tlc.py

specs-deep: $(STAMP)
	$(PY) specs/run_tlc.py --deep

bench: $(STAMP)
	$(PY) bench/bench_single.py
	$(PY) bench/bench_replicaset.py

bench-audit: $(STAMP)
	$(PY) bench/bench_audit.py --rows 10000000

bench-repair: $(STAMP)
	$(PY) bench/bench_repair.py

chaos: $(STAMP)
	$(PY) tools/chaos.py --seconds 90

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis
