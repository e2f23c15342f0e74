"""Our kernels: the C++ ops (csrc/: torch-free cores in csrc/kernels/, split into reference, x86 and
ARM, and their torch bindings in ops.cpp), built once by `make install` (native.py), the Python
wrappers beside them, and the quantized, packed and bf16-attention layers that run them. They know
nothing of models, requests or engines: runtime/kernel_plan.py decides which one runs where."""
