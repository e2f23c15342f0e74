// The INT8 prompt attention op's Python module: the op is in prefill_attention.h (decode_layer.cpp runs it too).
#include "prefill_attention.h"

inline bool prefill_simd() {
#ifdef PREFILL_SIMD
  return true;
#else
  return false;
#endif
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("int8_prefill_attention", &int8_prefill_attention, "prompt attention over an INT8 KV cache",
        py::call_guard<py::gil_scoped_release>());
  m.def("simd", &prefill_simd, "whether this build has the AVX-512 VNNI and BF16 path (else the op refuses)");
}
