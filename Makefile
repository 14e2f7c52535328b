# Two entry points matter: `make run` (the replicated key-value store on a local
# cluster) and `make test`.
# Both bootstrap first, so they work on a fresh Debian machine.
PY := .venv/bin/python
PYTEST := $(PY) -m pytest

.PHONY: bootstrap run cluster test test-fast lint typecheck docs bench soak chaos fuzz clean

bootstrap:
	@scripts/bootstrap.sh

run: bootstrap
	@.venv/bin/kvstore up $(ARGS)

cluster: bootstrap
	@$(PY) -m bookie.local.cluster $(ARGS)

# The tests also compare the key-value store with a real redis-server, drive it
# with redis-benchmark and load the status page in a headless browser, so they
# install those (Debian's redis-server, redis-tools, chromium).
test: bootstrap
	@scripts/bootstrap.sh redis-server redis-tools chromium
	@$(PY) -m ruff check .
	@$(PY) -m mypy
	@$(PYTEST) -q -p no:cacheprovider --durations=25 $(ARGS)

test-fast: bootstrap
	@$(PYTEST) -q -m "not slow" $(ARGS)

lint: bootstrap
	@$(PY) -m ruff check .
	@$(PY) -m ruff format --check .

typecheck: bootstrap
	@$(PY) -m mypy

# The API reference of the public surface (`rsm`, `rsm.errors`), from the docstrings,
# in docs/api/ (built on demand, not committed; a warning fails it).
docs: bootstrap
	@$(PY) scripts/api_docs.py docs/api

# Each benchmark prints one JSON line with its configuration and its baseline.
bench: bootstrap
	@for b in bookie ledger rsm recovery kvstore replay spark wakeup; do $(PY) bench/$${b}_bench.py || exit 1; done

# Long seeded simulations under faults (not part of `make test`): SEEDS seeds from
# FIRST, STEPS nemesis steps each.  Short runs cover many scenarios; long ones
# (STEPS=200: faults pile up) find what short ones do not.
SEEDS ?= 2000
FIRST ?= 0
STEPS ?= 8
soak: bootstrap
	@$(PY) -m bookie.testing.ledger_sim --seeds $(SEEDS) --first $(FIRST) --steps $(STEPS)
	@$(PY) -m rsm.testing.rsm_sim --seeds $(SEEDS) --first $(FIRST) --steps $(STEPS)
	@$(PY) -m rsm.testing.rsm_sim --seeds $(SEEDS) --first $(FIRST) --steps $(STEPS) \
		--faults machine-crash,replica-crash,bookie-crash
	@$(PY) -m rsm.testing.rsm_sim --seeds $(SEEDS) --first $(FIRST) --steps $(STEPS) \
		--faults bookie-loss,replica-crash,bookie-crash
	@$(PY) -m kvstore.testing.kv_sim --seeds $(SEEDS) --first $(FIRST) --steps $(STEPS)
	@$(PY) -m kvstore.testing.kv_sim --seeds $(SEEDS) --first $(FIRST) --steps $(STEPS) \
		--faults stall,replica-crash,bookie-crash,partition

# Faults on the real processes of a local store under Redis clients, one after another,
# for CHAOS_SECONDS (`make test` runs 30 s), the history checked for linearizability
# (docs/operations.md, "Chaos on real processes"); CHAOS_FAULTS=kill-replica,... keeps
# to those faults.
CHAOS_SECONDS ?= 600
CHAOS_SEED ?= 1
CHAOS_FAULTS ?=
chaos: bootstrap
	@KV_CHAOS_SECONDS=$(CHAOS_SECONDS) KV_CHAOS_SEED=$(CHAOS_SEED) \
		KV_CHAOS_FAULTS=$(CHAOS_FAULTS) $(PYTEST) -q -s \
		-p no:cacheprovider --timeout=$$(( $(CHAOS_SECONDS) + 600 )) \
		tests/integration/test_kvstore_chaos.py

# The long fuzz run of every decoder (`make test` runs a short one): Hypothesis with
# FUZZ_EXAMPLES examples per fuzz test, then atheris, coverage-guided, for FUZZ_SECONDS per
# decoder where it installs on this Python (docs/security.md, "Untrusted input").
FUZZ_EXAMPLES ?= 20000
FUZZ_SECONDS ?= 60
fuzz: bootstrap
	@$(PY) -m pip install -q atheris || echo "fuzz: atheris does not install here" >&2
	@$(PY) scripts/fuzz.py --examples $(FUZZ_EXAMPLES) --seconds-per-target $(FUZZ_SECONDS)

clean:
	rm -rf .venv .mypy_cache .ruff_cache .pytest_cache build *.egg-info
