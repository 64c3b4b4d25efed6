# pumpd — the two commands a fresh Debian/Ubuntu machine needs are `make demo` and `make test`.
PYTHON ?= python3
PIP ?= $(PYTHON) -m pip
INSTALL_STAMP := build/.installed

.PHONY: install build debug test lint demo spark-demo spark-pipeline-demo bench bench-report bench-micro clean rabbitmq

# rabbitmq-server from Debian's packages, only when it is missing (tests start private nodes).
rabbitmq:
	@test -x /usr/lib/rabbitmq/bin/rabbitmq-server || { \
	  echo "installing rabbitmq-server (Debian package)"; \
	  apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q rabbitmq-server; }

# The package with its dev extras; builds the Cython extension (release build).
install: rabbitmq
	$(PIP) install -q -e '.[dev]'
	@$(PYTHON) -c "import pumpd.dataplane.fastpath as f; print('pumpd data plane:', f.IMPLEMENTATION)"

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

# 1,000,000 generated rows through the PySpark data source `pumpd` into a queue on a private
# node; prints rows/s and checks the count (a JRE 17+ is needed; `--local` uses 127.0.0.1:5672).
spark-demo: install
	@java -version >/dev/null 2>&1 || { echo "spark-demo needs a JRE 17+ (apt-get install default-jre-headless)"; exit 1; }
	$(PYTHON) -m pumpd.spark.demo

# A stream read by Spark, transformed and published to an exchange (pumpd.spark.pipeline),
# SIGKILLed mid-way and restarted from its checkpoint: counts lost and duplicated messages.
spark-pipeline-demo: install
	@java -version >/dev/null 2>&1 || { echo "spark-pipeline-demo needs a JRE 17+ (apt-get install default-jre-headless)"; exit 1; }
	$(PYTHON) -m pumpd.spark.pipeline_demo

# The shovel benchmark, the confirm-strategy benchmark, the Spark data source's, then the PySpark
# report (about 30 minutes on 2 cores). The install step brings the bench extra (pyspark, pyarrow, matplotlib, aio-pika);
# the analysis needs a JRE 17+. A benchmark with a failed run still goes on to the report.
bench: install
	@echo "== 1/4 shovel benchmark: bench/shovel.py (about 12 minutes)"
	-$(PYTHON) bench/shovel.py
	@echo "== 2/4 confirm-strategy benchmark: bench/confirms.py --persistent (about 10 minutes)"
	-$(PYTHON) bench/confirms.py --persistent
	@echo "== 3/4 PySpark data source against foreachPartition + pika: bench/spark.py --rows 300000 (about 5 minutes)"
	-$(PYTHON) bench/spark.py --rows 300000 --individual-rows 3000
	@echo "== Spark readers (streams, queues) against rstream and pika: bench/spark_read.py (about 10 minutes)" && $(PYTHON) bench/spark_read.py || true
	@echo "== 4/4 analysis in PySpark: bench/analyse.py"
	$(PYTHON) bench/analyse.py
	@echo "the report: bench/report/README.md"

# Only the analysis, from the results already in bench/results/.
bench-report:
	$(PIP) install -q -e '.[dev]'
	$(PYTHON) bench/analyse.py
	@echo "the report: bench/report/README.md"

bench-micro: install
	$(PYTHON) -m pytest bench/micro -q --benchmark-only --benchmark-columns=min,median,mean

clean:
	rm -rf build *.egg-info src/_fastpath.c src/*.so .pytest_cache .mypy_cache
