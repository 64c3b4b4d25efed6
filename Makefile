# pumpd — the two commands a fresh Debian/Ubuntu machine needs are `make demo` and `make test`.
PYTHON ?= python3
PIP ?= $(PYTHON) -m pip
INSTALL_STAMP := build/.installed

.PHONY: install build debug test lint demo bench bench-micro clean rabbitmq

# rabbitmq-server from Debian's packages, only when it is missing (tests start private nodes).
rabbitmq:
	@test -x /usr/lib/rabbitmq/bin/rabbitmq-server || { \
	  echo "installing rabbitmq-server (Debian package)"; \
	  apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q rabbitmq-server; }

# The package with its dev extras; builds the Cython extension (release build).
install: rabbitmq
	$(PIP) install -q -e '.[dev]'
	@$(PYTHON) -c "import pumpd.fastpath as f; print('pumpd data plane:', f.IMPLEMENTATION)"

build:
	$(PIP) install -q -e '.[dev]'

# Same, with the extension's invariant checks compiled in.
debug:
	PUMPD_DEBUG=1 $(PIP) install -q -e '.[dev]'

test: install
	$(PYTHON) -m pytest

lint:
	$(PYTHON) -m mypy
	$(PYTHON) -m ruff check src tests bench

demo: install
	$(PYTHON) -m pumpd.demo

bench: install
	$(PYTHON) bench/shovel.py

bench-micro: install
	$(PYTHON) -m pytest bench/micro -q --benchmark-only --benchmark-columns=min,median,mean

clean:
	rm -rf build *.egg-info src/_fastpath.c src/*.so .pytest_cache .mypy_cache
