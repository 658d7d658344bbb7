# claudeq — one command per job. `make test` is what CI runs.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: venv demo test test-fast lint types pytest bench bench-scale bench-weight bench-web bench-api bench-sandbox bench-cache soak compose-check clean

venv: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	touch $(STAMP)

demo: venv
	$(BIN)/python ops/demo.py

# Run a short simulated workload under a real Prometheus and draw the dashboard with its data (docs/dashboard.png).
dashboard-snapshot: venv
	$(BIN)/python ops/grafana/snapshot.py

lint: venv
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/python ops/lua_check.py

types: venv
	$(BIN)/mypy

# Every tier at once on PYTEST_WORKERS processes (pytest-xdist): each test has its own key prefix, queue, ports and
# processes, so the tiers share nothing but the machine; a file's tests stay on one process (its fixtures are set up
# once). PYTEST_WORKERS=0 runs them in this process, one after another.
PYTEST_WORKERS ?= 2
pytest: venv
	$(BIN)/pytest -q -n $(PYTEST_WORKERS) --dist loadfile $(PYTEST_ARGS)

test: lint types pytest

# The unit tier alone (tests/unit: plain values and fakeredis, no Redis server, no CLI), in under a minute: its tests
# share nothing, so they run on every core (pytest-xdist).
test-fast: venv
	$(BIN)/pytest -q -n auto tests/unit $(PYTEST_ARGS)

# The long chaos soak (tests/chaos/): 3,000 jobs through 3 workers while a killer SIGKILLs them, Redis restarts and
# the simulator injects faults; prints the table of what the witnesses saw. Smaller: make soak SOAK_ARGS="--jobs 300"
soak: venv
	$(BIN)/python -m tests.chaos.soak $(SOAK_ARGS)

# Optional, needs a container engine (never part of `make test`; tests/unit/ops/test_compose.py checks the rest
# everywhere): the compose client's own validation and an image build.
compose-check:
	docker compose --profile sim config --quiet
	docker build -f ops/Dockerfile -t claudeq:local .

bench: venv
	$(BIN)/python -m bench.bench_simulator
	$(BIN)/python -m bench.bench_passthrough
	$(BIN)/python -m bench.bench_overhead
	$(BIN)/python -m bench.bench_warm
	$(BIN)/python -m bench.bench_goodput
	$(BIN)/python -m bench.bench_testing
	$(BIN)/python -m bench.bench_worktree

# The run sandbox's cost: read-only jobs with a cwd, sandboxed against not, in one run (real workers, CLI, simulator).
# More: make bench-sandbox BENCH_SANDBOX_ARGS="--jobs 24 --rounds 5"
bench-sandbox: venv
	$(BIN)/python -m bench.bench_sandbox $(BENCH_SANDBOX_ARGS)

# `claudeq web`'s job list with 100,000 retained jobs against 1,000 (private Redis, real HTTP).
# Prompt caching across jobs, three ways in one run (real CLI, simulator; a few minutes). Other sizes:
# make bench-cache BENCH_CACHE_ARGS="--jobs 72 --ttl 60"
bench-cache: venv
	$(BIN)/python -m bench.bench_cache $(BENCH_CACHE_ARGS)

bench-web: venv
	$(BIN)/python -m bench.bench_web $(BENCH_WEB_ARGS)

# Submitting through the HTTP API (`claudeq api`, real HTTP) against Client.submit, same run (private Redis).
bench-api: venv
	$(BIN)/python -m bench.bench_api $(BENCH_API_ARGS)

# The control plane alone at fleet scale (fake runner, private Redis). Smaller: make bench-scale BENCH_SCALE_ARGS="--jobs 20000"
# Then one engine alone (no Celery): CPU per job as built vs every Redis call in a thread.
bench-scale: venv
	$(BIN)/python -m bench.bench_scale $(BENCH_SCALE_ARGS)
	$(BIN)/python -m bench.bench_engine

# What real jobs weigh in Redis, per key family, against today's main's storage in the same run (real worker, CLI and
# simulator; a few minutes). Larger: make bench-weight BENCH_WEIGHT_ARGS="--each 4"
bench-weight: venv
	$(BIN)/python -m bench.bench_weight $(BENCH_WEIGHT_ARGS)

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
