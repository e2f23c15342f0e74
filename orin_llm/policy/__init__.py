"""The robot's policy, next door to the planner: a stand-in ONNX policy (standin.py), a fixed-rate
runner in its own process that measures itself (runner.py, loop.py, measure.py), its size for the
memory plan read from the ONNX file (onnx_size.py), and its backends:
onnxruntime on a CPU (backends.py), TensorRT + pycuda on the Orin or any CUDA machine (tensorrt.py,
behind the import boundary trt_bindings.py)."""
