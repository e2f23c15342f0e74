// The INT8 decode attention op's Python module: the op is in int8_attention.h (decode_layer.cpp runs it too).
#include "int8_attention.h"

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("int8_decode_attention", &int8_decode_attention, "decode attention over an INT8 KV cache",
        py::call_guard<py::gil_scoped_release>());
}
