// Which kernels this build runs (ggml-cpu's way: reference loops, arch/x86, arch/arm, and this
// fallback header): the x86 ones where the compiler targets AVX2 (q8 tiles) or AVX-512 (attention
// scores, and VNNI + BF16 for the prompt op), the ARM ones on AArch64 NEON (with dotprod for the q8
// tiles), else the reference loops. The build is for this CPU (-march/-mcpu=native: kernels/native.py),
// so the choice is made at compile time. ORIN_LLM_GENERIC (or ORIN_LLM_Q8_GENERIC /
// ORIN_LLM_ATTN_GENERIC for one family) forces the reference loops: the tests compare such a build
// with this CPU's.
#pragma once

#include "arm.h"
#include "ops.h"
#include "ref.h"
#include "x86.h"

namespace orin {

#if defined(ORIN_LLM_GENERIC) || defined(ORIN_LLM_Q8_GENERIC)
using Q8Kernels = RefQ8;
#elif defined(ORIN_X86_Q8)
using Q8Kernels = X86Q8;
#elif defined(ORIN_NEON_Q8)
using Q8Kernels = NeonQ8;
#else
using Q8Kernels = RefQ8;
#endif

#if defined(ORIN_LLM_GENERIC) || defined(ORIN_LLM_ATTN_GENERIC)
using AttnKernels = RefAttn;
#elif defined(ORIN_X86_ATTN)
using AttnKernels = X86Attn;
#elif defined(ORIN_NEON_ATTN)
using AttnKernels = NeonAttn;
#else
using AttnKernels = RefAttn;
#endif

// The prompt attention op has x86 kernels only (AVX-512 VNNI and BF16); elsewhere the module has no
// such op (prefill_simd() is false) and prompt attention runs torch's bf16 GEMMs.
#if defined(ORIN_X86_PREFILL) && !defined(ORIN_LLM_GENERIC)
constexpr bool HAS_PREFILL = true;
#else
constexpr bool HAS_PREFILL = false;
#endif

}  // namespace orin
