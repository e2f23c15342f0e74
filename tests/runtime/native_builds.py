"""The test-only build of our C++ ops with the reference loops everywhere (ORIN_LLM_GENERIC: what a
CPU without x86 or NEON kernels compiles), which the kernel tests compare with the installed build.
Compiled on first use into torch's extension cache (minutes once), shared by the tests."""

from __future__ import annotations

import functools

from orin_llm.kernels.native import NativeLib


@functools.cache
def generic() -> NativeLib:
    return NativeLib("ops", "our C++ ops (reference loops)", "-",
                     defines=("ORIN_LLM_GENERIC",))
