// The q8_dot kernels' Python module: the kernels are in q8_dot.h (decode_layer.cpp runs them too).
#include "q8_dot.h"

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("simd", &simd, "the build's code path");
  m.def("q4_1_linear", &q4_1_linear, "Q4_1 weights x int8 activations",
        py::call_guard<py::gil_scoped_release>());
  m.def("q8_linear", &q8_linear, "int8 per-row weights x int16 activations",
        py::call_guard<py::gil_scoped_release>());
  m.def("quantize_activations", &quantize_activations, "integer codes and scales of x, blocks of 32");
}
