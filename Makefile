# pumpd — the two commands a fresh Debian/Ubuntu machine needs are `make demo` and `make test`.
# Everything runs in the project's virtual environment .venv, made with the system's python3
# (PYTHON=/path/to/python3 picks another interpreter to make it from); nothing is installed into
# the system's Python. What the distribution must provide (python3-venv, python3-dev, gcc, make,
# rabbitmq-server) is installed with apt-get when missing and make runs as root; otherwise make
# prints the apt-get line to run. See tools/system-packages and tools/venv.
PYTHON ?= python3
VENV ?= .venv
VPY := $(VENV)/bin/python

.PHONY: venv install build debug dist test test-fast lint docs demo spark-demo spark-pipeline-demo bench \
	bench-report bench-micro \
	clean distclean rabbitmq system-packages

system-packages:
	@tools/system-packages $(PYTHON)

# rabbitmq-server from the distribution, only when it is missing (tests start private nodes).
rabbitmq:
	@tools/system-packages $(PYTHON) rabbitmq

# The venv with pumpd installed editable and its dev extras (release build of the extension);
# cheap when nothing it was made from changed.
venv: system-packages
	@tools/venv $(PYTHON) $(VENV)

install: rabbitmq venv
	@$(VPY) -c "import pumpd.dataplane.implementation as f; print('pumpd data plane:', f.IMPLEMENTATION)"

# Rebuild the extension (release build) whatever the stamp says.
build: system-packages
	@rm -f $(VENV)/.pumpd-installed
	@tools/venv $(PYTHON) $(VENV)

# Same, with the extension's invariant checks compiled in (until the next build or edit).
debug: venv
	PUMPD_DEBUG=1 $(VPY) -m pip install -q -e '.[dev]'

# An sdist and a wheel in dist/ (python -m build).
dist: venv
	$(VPY) -m build

# Both lanes: tests/unit and tests/integration (private RabbitMQ nodes, Spark, daemons).
test: install
	$(VPY) -m pytest

# The unit lane alone, in this process: no broker, no Spark JVM, no daemon, no command started.
# Its property tests run Hypothesis' own 100 examples (HYPOTHESIS_PROFILE=fast) unless told
# otherwise; make test runs them with the default profile.
test-fast: install
	HYPOTHESIS_PROFILE=$${HYPOTHESIS_PROFILE:-fast} $(VPY) -m pytest tests/unit

lint: venv
	$(VPY) -m mypy
	$(VPY) -m ruff check src tests bench

demo: install
	$(VPY) -m pumpd.demo

# 1,000,000 generated rows through the PySpark data source `pumpd` into a queue on a private
# node; prints rows/s and checks the count (a JRE 17+ is needed; `--local` uses 127.0.0.1:5672).
spark-demo: install
	@java -version >/dev/null 2>&1 || { echo "spark-demo needs a JRE 17+ (apt-get install default-jre-headless)"; exit 1; }
	$(VPY) -m pumpd.spark.demos.write_demo

# A stream read by Spark, transformed and published to an exchange (pumpd.spark.pipeline),
# SIGKILLed mid-way and restarted from its checkpoint: counts lost and duplicated messages.
spark-pipeline-demo: install
	@java -version >/dev/null 2>&1 || { echo "spark-pipeline-demo needs a JRE 17+ (apt-get install default-jre-headless)"; exit 1; }
	$(VPY) -m pumpd.spark.demos.pipeline_demo

# The shovel benchmark, the confirm-strategy benchmark, the Spark data source's (writing and
# reading), the latency benchmark, the failover benchmarks, then the PySpark report (about 60 minutes on 2 cores). The install step brings the bench extra (pyspark, pyarrow, matplotlib, aio-pika);
# the analysis needs a JRE 17+. A benchmark with a failed run still goes on to the report.
bench: install
	@echo "== 1/9 shovel benchmark: bench/shovel.py (about 12 minutes)"
	-$(VPY) bench/shovel.py
	@echo "== 2/9 confirm-strategy benchmark: bench/confirms.py --persistent (about 10 minutes)"
	-$(VPY) bench/confirms.py --persistent
	@echo "== 3/9 PySpark data source against foreachPartition + pika: bench/spark.py --rows 300000 (about 5 minutes)"
	-$(VPY) bench/spark.py --rows 300000 --individual-rows 3000
	@echo "== 4/9 Spark readers (streams, queues) against rstream and pika: bench/spark_read.py, then rows/s against a super stream's partitions: --partitions 1,2,4 (about 16 minutes)"
	-$(VPY) bench/spark_read.py
	-$(VPY) bench/spark_read.py --partitions 1,2,4 --reps 3
	@echo "== 5/9 latency: no shovel, the plugin and pumpd at paced rates: bench/latency.py (about 8 minutes)"
	-$(VPY) bench/latency.py
	@echo "== 6/9 failover: a broker of the list down (bench/broker_failover.py), a member of a group killed and frozen (bench/failover.py) (about 4 minutes)"
	-$(VPY) bench/broker_failover.py --reps 1
	-$(VPY) bench/failover.py
	@echo "== 7/9 stream to stream with and without deduplication against the plugin: bench/stream_shovel.py (about 4 minutes)"
	-$(VPY) bench/stream_shovel.py
	@echo "== 8/9 Spark into a stream, a queue and rstream's producer; one stream read task against rstream with varied metadata: bench/spark_stream_write.py, bench/stream_task.py (about 8 minutes)"
	-$(VPY) bench/spark_stream_write.py
	-$(VPY) bench/stream_task.py --reps 3 --metadata varied --systems raw-rstream,pumpd-task
	@echo "== 9/9 analysis in PySpark: bench/analyse.py"
	$(VPY) bench/analyse.py
	@echo "the report: bench/report/README.md"

# Only the analysis, from the results already in bench/results/.
bench-report: venv
	$(VPY) bench/analyse.py
	@echo "the report: bench/report/README.md"

bench-micro: install
	$(VPY) -m pytest bench/micro -q --benchmark-only --benchmark-columns=min,median,mean

# The documentation site in site/: the generated reference pages (tools/gen_docs.py), then a strict
# build, so that a broken link or a warning fails it.
docs: venv
	$(VPY) tools/gen_docs.py
	$(VPY) -m mkdocs build --strict -d site

clean:
	rm -rf build dist *.egg-info src/*.egg-info src/_fastpath.c src/*.so .pytest_cache .mypy_cache
	rm -f $(VENV)/.pumpd-installed

# Also the virtual environment.
distclean: clean
	rm -rf $(VENV)
