# The README's first two commands: `make run` and `make test`. Each sets itself up.
PYTHON ?= python3
VENV   ?= .venv
PY      = $(VENV)/bin/python
STAMP   = $(VENV)/.installed-stamp
PROTOS  = $(wildcard protos/agora/v1/*.proto)

.PHONY: install run test protos lint system-deps clean experiments

# An editable install maps the packages that exist when it runs: adding one reinstalls.
# setuptools' notice that an editable install's source folders could shadow the package (here
# they are the package) is silenced; its other warnings still show.
$(STAMP): pyproject.toml setup.py $(wildcard */__init__.py)
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	PYTHONWARNINGS="ignore:Editable installation" $(PY) -m pip install --quiet -e '.[dev]' \
		--config-settings editable_mode=lenient
	touch $(STAMP)

install: $(STAMP)

# Debian packages the tests need (iproute2 for network namespaces). Skipped when present.
system-deps:
	@sh scripts/system-deps.sh

run: install
	$(VENV)/bin/agora local

test: install system-deps
	$(PY) -m pytest -n auto --dist loadgroup -q

protos: install
	$(PY) -m grpc_tools.protoc -I protos --python_out=protos --pyi_out=protos \
		--grpc_python_out=protos $(PROTOS)

# Runs every experiment at its documented size (about 70 minutes on 2 cores, 30 of them the
# soak, 9 omega) and regenerates
# docs/figures/ and the results section of docs/experiments.md.
experiments: install
	$(PY) -m agora.experiments.report --docs docs

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	sh scripts/typecheck.sh

clean:
	rm -rf $(VENV) .pytest_cache build *.egg-info
