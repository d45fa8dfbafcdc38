# Shoal: the two commands that matter are `make run` and `make test` (see README.md).
PYTHON ?= python3
VENV   ?= .venv
PORT   ?= 9092
DATA_DIR ?= ./data
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: setup run test test-slow test-crash bench bench-spark bench-hostile kcat java clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test,bench,spark]'
	touch $(STAMP)

setup: $(STAMP)

## Start a broker in the foreground on 127.0.0.1:$(PORT) with data in $(DATA_DIR).
run: $(STAMP)
	$(BIN)/shoal broker --listen 127.0.0.1:$(PORT) --data-dir $(DATA_DIR)

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

## The whole fast suite (slow soak runs are excluded; see test-slow).
test: $(STAMP) kcat java
	$(BIN)/pytest -m "not slow" -p no:cacheprovider

## Soak runs excluded from `make test` (bounded share-state log, repeated crash tests, ...).
test-slow: $(STAMP) kcat java
	$(BIN)/pytest -m slow -p no:cacheprovider

## The share-state crash test repeated at 20 random kill points.
test-crash: $(STAMP)
	$(BIN)/pytest -m slow -k crash -p no:cacheprovider

## Benchmark (bench/README.md): a fresh broker, scenarios a-h, a report in bench/results/<timestamp>/.
## PROFILE=1 profiles the broker during (b); SCALE=0.05 is a quick run; BOOTSTRAP=host:port also
## runs the client-side scenarios against another Kafka-protocol broker for comparison.
bench: $(STAMP)
	$(BIN)/python -m bench.run $(if $(PROFILE),--profile,) $(if $(SCALE),--scale $(SCALE),) $(if $(BOOTSTRAP),--bootstrap $(BOOTSTRAP),)

## Scenario (g) alone: records/s through a trivial Spark streaming query on the shoal-share
## source (pipeline/, issue 8). Needs Java (make java); SCALE=0.2 is a quick run.
bench-spark: $(STAMP) java
	$(BIN)/python -m bench.run --only g $(if $(SCALE),--scale $(SCALE),)

## Scenario (h) alone: hostile load (issue 12) against a broker of its own while a control
## producer/consumer pair measures round trips; SCALE=0.1 is a quick run.
bench-hostile: $(STAMP)
	$(BIN)/python -m bench.run --only h $(if $(SCALE),--scale $(SCALE),)

clean:
	rm -rf $(VENV) data .pytest_cache
