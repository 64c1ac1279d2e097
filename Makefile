# bkaudit — two commands on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
AIRFLOW_VENV := .venv-airflow
AIRFLOW_STAMP := $(AIRFLOW_VENV)/.installed
PYTEST_ARGS ?=

# Python's default: cache byte-code. An environment that turns it off (PYTHONDONTWRITEBYTECODE) makes every
# process the tests start (bookies, CLI runs, Spark's Python workers) compile bkaudit again: half a second each.
unexport PYTHONDONTWRITEBYTECODE

.PHONY: demo test test-setup jars system test-fast test-unit lint bench bench-quick bench-recovery airflow prereqs browser prometheus bookkeeper delta s3a clean dist dist-env

prereqs:
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "bkaudit needs Python 3.11+ (found " + sys.version.split()[0] + "); run: make PYTHON=/path/to/python3.11 ...")'
	@command -v java >/dev/null 2>&1 || { echo "bkaudit needs Java 17+ for ZooKeeper and Spark (Debian: apt-get install openjdk-17-jre-headless)"; exit 1; }
	@v=$$(java -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -n 1); \
	  [ "$${v:-0}" -ge 17 ] || { echo "bkaudit needs Java 17+, found Java $${v:-unknown} (Debian: apt-get install openjdk-17-jre-headless)"; exit 1; }

$(STAMP): pyproject.toml | prereqs
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	@touch $(STAMP)

$(AIRFLOW_STAMP): airflow_dags/requirements.txt | prereqs
	@test -x $(AIRFLOW_VENV)/bin/python || $(PYTHON) -m venv $(AIRFLOW_VENV)
	$(AIRFLOW_VENV)/bin/python -m pip install -q --upgrade pip
	$(AIRFLOW_VENV)/bin/python -m pip install -q -r airflow_dags/requirements.txt
	@touch $(AIRFLOW_STAMP)

airflow: $(AIRFLOW_STAMP)

# the dashboard test drives Debian's chromium headless (CI runs as root on a fresh machine)
browser:
	@if [ ! -x /usr/bin/chromium ] || [ ! -x /usr/bin/chromedriver ]; then \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -q && apt-get install -y -q chromium chromium-driver; \
	  else sudo apt-get update -q && sudo apt-get install -y -q chromium chromium-driver; fi; \
	fi

# Delta Lake's own Spark engine (tests/delta/pom.xml): delta-spark and delta-storage only, on pyspark's Spark
DELTA_HOME := .cache/delta
DELTA_STAMP := $(DELTA_HOME)/.resolved

delta: $(DELTA_STAMP)

$(DELTA_STAMP): tests/delta/pom.xml | prereqs
	$(call fetch_jars,Delta Lake,tests/delta/pom.xml,$(DELTA_HOME),-DexcludeTransitive=true)

# Hadoop's S3A connector (tests/s3a/pom.xml): hadoop-aws at pyspark's Hadoop version and the AWS SDK v2 modules it
# loads (not the SDK's 686 MB bundle), for Spark on `s3a://` warehouses
S3A_HOME := .cache/s3a
S3A_STAMP := $(S3A_HOME)/.resolved

s3a: $(S3A_STAMP)

$(S3A_STAMP): tests/s3a/pom.xml | prereqs
	$(call fetch_jars,Hadoop S3A,tests/s3a/pom.xml,$(S3A_HOME),)

# the monitoring tests run Debian's Prometheus server (with promtool), Pushgateway and node_exporter on loopback
PROMETHEUS_BINS := /usr/bin/prometheus /usr/bin/promtool /usr/bin/prometheus-pushgateway /usr/bin/prometheus-node-exporter
prometheus:
	@for b in $(PROMETHEUS_BINS); do [ -x $$b ] || missing=1; done; \
	if [ -n "$$missing" ]; then \
	  pkgs="prometheus prometheus-pushgateway prometheus-node-exporter"; \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -q && apt-get install -y -q --no-install-recommends $$pkgs; \
	  else sudo apt-get update -q && sudo apt-get install -y -q --no-install-recommends $$pkgs; fi; \
	fi

# Apache BookKeeper's released jars from Maven Central, by coordinates (tests/java/pom.xml), into an ignored
# cache on a classpath of their own, and our small Java client driver compiled against them. Never built from
# BookKeeper's source; never committed.
BK_HOME := .cache/bookkeeper
BK_STAMP := $(BK_HOME)/.resolved
BK_DRIVER := $(BK_HOME)/classes/BkDriver.class

bookkeeper: $(BK_STAMP) $(BK_DRIVER)

# $(call fetch_jars,<what>,<pom>,<cache dir>,<extra mvn flags>): one way to fetch released jars by coordinates
define fetch_jars
	@command -v mvn >/dev/null 2>&1 || { echo "bkaudit's tests need Maven to fetch $(1)'s jars (Debian: apt-get install maven)"; exit 1; }
	@rm -rf $(3)/lib && mkdir -p $(3)
	@mvn -B -q -f $(2) dependency:copy-dependencies -DoutputDirectory=$(CURDIR)/$(3)/lib $(4) \
	  > $(3)/mvn.log 2>&1 || { echo "Maven could not resolve $(1) from Maven Central (unreachable or refused): see $(3)/mvn.log, from: mvn -f $(2) dependency:copy-dependencies"; exit 1; }
	@touch $(3)/.resolved
endef

$(BK_STAMP): tests/java/pom.xml | prereqs
	$(call fetch_jars,Apache BookKeeper,tests/java/pom.xml,$(BK_HOME),)

$(BK_DRIVER): tests/java/src/BkDriver.java $(BK_STAMP)
	@command -v javac >/dev/null 2>&1 || { echo "bkaudit's tests need a JDK (javac) to compile tests/java (Debian: apt-get install openjdk-17-jdk-headless)"; exit 1; }
	@mkdir -p $(BK_HOME)/classes
	javac -nowarn -d $(BK_HOME)/classes -cp '$(BK_HOME)/lib/*' tests/java/src/BkDriver.java 2>&1 | grep -v '^Note:' || true
	@test -f $(BK_DRIVER)

demo: $(STAMP)
	$(VENV)/bin/bkaudit demo

lint: $(STAMP)
	$(VENV)/bin/ruff check bkaudit jobs tests bench airflow_dags
	$(VENV)/bin/mypy

# four workers, each test file on one (module fixtures stay whole), the longest file first
# (tests/scheduling.py): the suite waits on bookies, ZooKeeper sessions and JVMs as much as it computes, so 2
# cores run four files at once. Measured in fresh clones on 2026-11-29: pytest took 23:46 with three workers,
# 22:58 with four
PYTEST_WORKERS ?= 4

# make test's setup, at once where that is safe: the two virtualenvs and the packed environment side by side;
# Maven (3.8 does not lock its local repository) and apt (one dpkg lock) one resolution at a time
test-setup:
	@$(MAKE) --no-print-directory -j4 --output-sync=target $(STAMP) $(AIRFLOW_STAMP) $(ENV_PACK) jars system

jars:
	@$(MAKE) --no-print-directory bookkeeper
	@$(MAKE) --no-print-directory delta
	@$(MAKE) --no-print-directory s3a

system:
	@$(MAKE) --no-print-directory browser
	@$(MAKE) --no-print-directory prometheus

# the lint runs beside the tests (mypy alone takes half a minute on a fresh clone); either failing fails.
# Tests marked `timing` (their stand-in bookie serves at a fixed pace against a client's timer) run after
# both, alone on the machine: beside four workers on two cores, two CI runs (2026-12-07) lost listings to the
# client's timer in that file; alone, the same tests passed (4 in 12 s)
test: test-setup
	@$(MAKE) --no-print-directory lint > .lint.log 2>&1 & lint=$$!; \
	$(PY) -m pytest -n $(PYTEST_WORKERS) --dist loadfile -m "not timing" $(PYTEST_ARGS); tests=$$?; \
	wait $$lint; linted=$$?; cat .lint.log; \
	[ $$linted -eq 0 ] || echo "make test: the lint failed (above)"; \
	$(PY) -m pytest -m timing $(PYTEST_ARGS); timed=$$?; \
	[ $$tests -eq 0 ] && [ $$timed -eq 0 ] && [ $$linted -eq 0 ]

test-fast: $(STAMP) bookkeeper lint
	$(PY) -m pytest -m "not slow" $(PYTEST_ARGS)

# the inner loop: tests/ is split by subject (tests/README.md), a test's kind is its markers. This selects every
# test that uses none of the fixtures that start ZooKeeper, Spark or BookKeeper's JVMs (tests/conftest.py) and
# is not marked slow or airflow: the pure tests, and the few others that carry no marker (a CLI subprocess)
UNIT_MARKERS := not cluster and not spark and not java and not slow and not airflow
test-unit: $(STAMP)
	$(PY) -m pytest -n 2 -m "$(UNIT_MARKERS)" $(PYTEST_ARGS)

bench: $(STAMP)
	$(PY) -m bench.formats

# The smaller rows of docs/performance.md through bench/harness.py (fresh processes, alternated sides, 3 runs
# each, medians): formats, the checker at 10,000 ledgers, the snapshot at 10,000, and the checker at 10,000
# ledgers on Apache BookKeeper's Java bookies against BookKeeper's own Auditor (replicasCheck). Under 10 minutes
# on 2 cores. The 100,000 and 1,000,000 rows: see docs/performance.md ("Reproducing").
BENCH_OUT ?= bench/results/quick
bench-quick: $(STAMP) bookkeeper
	$(PY) -m bench.formats --json $(BENCH_OUT)/formats.json
	$(PY) -m bench.checker --quick --json $(BENCH_OUT)/checker-10000.json
	$(PY) -m bench.snapshot --quick --sides a,a2,b,c --json $(BENCH_OUT)/snapshot-10000.json
	$(PY) -m bench.java_auditor --quick --json $(BENCH_OUT)/java-auditor-replicas-10000.json

# AutoRecovery's quick row: 5 realistic ledgers (10k-50k entries of 1-4 KiB), 3 alternated runs of each scenario,
# ~10 minutes. The 200-ledger row (hours, ~50 GB of disk): see docs/performance.md.
bench-recovery: $(STAMP)
	$(PY) -m bench.recovery --quick --json $(BENCH_OUT)/recovery-quick.json

# The wheel (core; `bkaudit[spark]` adds pyspark) and dist/bkaudit-pyfiles.zip for `spark-submit --py-files`.
# Rebuilt only when the package changes (the standalone-cluster test asks for them on every run).
PACKAGE_FILES := pyproject.toml deploy/build_pyfiles.py $(shell find bkaudit -type f -not -name '*.pyc' -not -path '*/__pycache__/*')
PYFILES := dist/bkaudit-pyfiles.zip
ENV_PACK := dist/bkaudit-env.tar.gz

dist: $(PYFILES)

$(PYFILES): $(STAMP) $(PACKAGE_FILES)
	rm -rf dist build/lib build/bdist.* && mkdir -p dist
	$(PY) -m pip wheel -q --no-deps --no-build-isolation -w dist .
	$(PY) deploy/build_pyfiles.py $(PYFILES)

# A relocatable environment with bkaudit and its dependencies but not pyspark (the cluster brings Spark), for
# `spark-submit --archives dist/bkaudit-env.tar.gz#env --conf spark.pyspark.python=./env/bin/python`.
# The dependencies (pyproject.toml's [project] dependencies) install while .venv is being made; the wheel
# goes in last. Not byte-compiled: a smaller pack; an executor's Python compiles what it imports once.
ENV_DEPS := build/env/.dependencies

dist-env: $(ENV_PACK)

$(ENV_DEPS): pyproject.toml | prereqs
	rm -rf build/env && mkdir -p build
	$(PYTHON) -c 'import tomllib; print("\n".join(tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"]))' > build/env-requirements.txt
	$(PYTHON) -m venv build/env
	build/env/bin/python -m pip install -q --no-compile venv-pack -r build/env-requirements.txt
	@touch $(ENV_DEPS)

$(ENV_PACK): $(ENV_DEPS) $(PYFILES)
	rm -f $(ENV_PACK)
	build/env/bin/python -m pip install -q --no-compile --no-deps --force-reinstall dist/bkaudit-*.whl
	build/env/bin/venv-pack -q --compress-level 1 -p build/env -o $(ENV_PACK)

clean:
	rm -rf $(VENV) $(AIRFLOW_VENV) .pytest_cache .mypy_cache .ruff_cache build dist *.egg-info .lint.log
