"""The distributions the Orin's device path imports, each with the line that imports it or installs it.

`jetson/constraints-0.12-jetson.txt` must pin every one (`pins.unpinned`): an unpinned one is whatever pip
takes on the day of the install, and cuda-python 13 (no `cuda.cudart`) showed what that costs. The
device path: `import tensorrt_llm` (the runtime imports `tensorrt_llm.bindings.executor`, which loads
the package; convert_checkpoint.py and trtllm-build import it too), the lines of TensorRT-LLM's own
requirements that its setup.py installs on L4T, the source build's tools, and orin-llm's `device` extra.

"R" = TensorRT-LLM tag v0.12.0 (28fb9aac), "J" = branch v0.12.0-jetson (20a7cec): docs/trtllm-0.12-jetson.md §0.
The package-load imports were found by reading R's module-level imports from tensorrt_llm/__init__.py
on (§11 says how); imports under `if ENABLE_MULTI_DEVICE:` (mpi4py) are left out, as J's build_wheel.py
sets ENABLE_MULTI_DEVICE=0 on L4T, and so is pynvml, which J's auto_parallel/cluster_info.py imports
only off L4T.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DeviceImport:
    distribution: str  # the name pip knows
    where: str  # the source that imports or installs it


# `import tensorrt_llm`, module level.
PACKAGE_LOAD = (
    DeviceImport("cuda-python", "J tensorrt_llm/auto_parallel/cluster_info.py L8; R runtime/generation.py L31, "
                                "_ipc_utils.py L21-22"),
    DeviceImport("numpy", "R tensorrt_llm/functional.py L22"),
    DeviceImport("torch", "R tensorrt_llm/_common.py L27"),
    DeviceImport("tensorrt", "R tensorrt_llm/functional.py L25"),
    DeviceImport("transformers", "R tensorrt_llm/quantization/quantize_by_modelopt.py L36"),
    DeviceImport("tokenizers", "orin_llm/runtime/tokenizer.py L39 (the engine's tokenizer.json)"),
    DeviceImport("datasets", "R tensorrt_llm/quantization/quantize_by_modelopt.py L33"),
    DeviceImport("safetensors", "R tensorrt_llm/quantization/quantize_by_modelopt.py L31"),
    DeviceImport("packaging", "R tensorrt_llm/_utils.py L28"),
    DeviceImport("filelock", "R tensorrt_llm/auto_parallel/auto_parallel.py L8"),
    DeviceImport("pandas", "R tensorrt_llm/auto_parallel/tensor_parallel/shape_consistency.py L6"),
    DeviceImport("pulp", "R tensorrt_llm/auto_parallel/solver.py L9"),
    DeviceImport("StrEnum", "R tensorrt_llm/quantization/mode.py L18"),
    DeviceImport("h5py", "R tensorrt_llm/models/gemma/convert.py L26"),
    DeviceImport("sentencepiece", "R tensorrt_llm/models/gemma/convert.py L29"),
    DeviceImport("janus", "R tensorrt_llm/executor.py L18"),
    DeviceImport("requests", "R tensorrt_llm/runtime/multimodal_model_runner.py L6"),
    DeviceImport("huggingface-hub", "R tensorrt_llm/runtime/multimodal_model_runner.py L13"),
    DeviceImport("pillow", "R tensorrt_llm/runtime/multimodal_model_runner.py L14"),
    DeviceImport("tqdm", "R tensorrt_llm/models/baichuan/convert.py L27"),
    DeviceImport("PyYAML", "R tensorrt_llm/lora_manager.py L11"),
    DeviceImport("typing-extensions", "R tensorrt_llm/models/gemma/config.py L18"),
    DeviceImport("polygraphy", "R tensorrt_llm/logger.py L22 (in a try block)"),
    DeviceImport("psutil", "R tensorrt_llm/profiler.py L25 (in a try block)"),
)

# J requirements-jetson.txt: TensorRT-LLM's setup.py installs every line on L4T (J setup.py).
JETSON_REQUIREMENTS = tuple(DeviceImport(name, f"J requirements-jetson.txt L{line}") for name, line in (
    ("accelerate", 2), ("build", 3), ("colored", 4), ("diffusers", 6), ("lark", 7), ("onnx", 9),
    ("nvidia-modelopt", 20), ("wheel", 23), ("optimum", 24), ("evaluate", 25), ("mpmath", 27)))

# The source build (J scripts/build_wheel.py main(); R cpp/tensorrt_llm/pybind/CMakeLists.txt L13-24).
BUILD_TOOLS = (
    DeviceImport("pybind11", "R cpp/tensorrt_llm/pybind/CMakeLists.txt L13-24"),
    DeviceImport("pybind11-stubgen", "J scripts/build_wheel.py main()"),
    DeviceImport("setuptools", "J scripts/build_wheel.py main(): python -m build --no-isolation"),
)

# orin-llm's own: pyproject.toml's `device` extra.
ORIN_LLM_DEVICE = (
    DeviceImport("tensorrt-llm", "pyproject.toml [device]"),
    DeviceImport("pycuda", "orin_llm/policy/trt_bindings.py L94"),
    DeviceImport("jetson-stats", "pyproject.toml [device]"),
)

DEVICE_IMPORTS = PACKAGE_LOAD + JETSON_REQUIREMENTS + BUILD_TOOLS + ORIN_LLM_DEVICE
