// Quantized weights times integer-quantized activations, in integer dot products (CPU): see
// orin_llm/runtime/q8_dot.py.
//
// llama.cpp's way (ggml's Q4_1 x Q8_1 and Q8_0 x Q8_0 dot products): each row of x is quantized to
// int8 (int16 against int8 weights) in blocks of 32 (a float scale per block), and a weight block's dot product with it is one
// integer sum (exact) times the two scales. A decode step then reads the weights as they are stored
// (4 or 8 bits) and spends a few integer instructions per 32 multiply-adds, where torch's weight-only
// kernels convert every weight to float first (their cost on one core, not the memory's).
//
// Every output is computed by one code path, in one fixed order that depends only on its own row of
// x and its row of weights: an M-row call's row m is bit for bit the one-row call on x[m], whatever
// M is and however the threads split the outputs. That is what keeps greedy speculation exactly
// lossless (a verify step's rows equal the decode steps'), and what runtime/packed.rows_independent
// probes at load. x86 with AVX2 runs intrinsics (VNNI's dpbusd where the CPU has it). Other CPUs get
// plain loops (ORIN_LLM_Q8_GENERIC forces them, for the tests): correct, but slower than torch's
// kernels, so q8_dot.py does not use them (an aarch64 path, with sdot, is not written yet).
#pragma once

#include <torch/extension.h>

#include <ATen/Parallel.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <algorithm>
#include <type_traits>

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__) && !defined(ORIN_LLM_Q8_GENERIC)
#include <immintrin.h>
#define Q8_AVX2 1
#endif

namespace {

constexpr int BLOCK = 32;  // weights (and activations) per scale: a GGUF block

// One row of x ([K] float32) to integer codes in blocks of 32: d = amax/QMAX, q = round(x/d) (ties
// to even, as torch.round; x times the float32 reciprocal, as tests/runtime/test_q8_dot.py redoes it),
// and per block d and d·Σq (what a Q4_1 block's min multiplies). int8 codes (QMAX 127) for the Q4_1
// layers, as llama.cpp's Q8_1; int16 (QMAX 32767) for int8 weights, whose main use is the lm_head's
// candidate pass: its exactness bound grows with the activations' rounding (head.py), and int8
// activations left hundreds of candidates a row where int16 leaves a handful.
template <typename Q, int QMAX>
void quantize_row(const float* x, int64_t k, Q* q, float* d, float* s) {
  for (int64_t b = 0; b < k / BLOCK; ++b) {
    const float* xb = x + b * BLOCK;
    float amax = 0.0f;
    for (int i = 0; i < BLOCK; ++i) amax = std::fmax(amax, std::fabs(xb[i]));
    const float db = amax / static_cast<float>(QMAX);
    const float id = db > 0.0f ? 1.0f / db : 0.0f;
    int sum = 0;
    for (int i = 0; i < BLOCK; ++i) {
      const int v = static_cast<int>(std::nearbyint(xb[i] * id));
      q[b * BLOCK + i] = static_cast<Q>(v);
      sum += v;
    }
    d[b] = db;
    s[b] = db * static_cast<float>(sum);
  }
}

#ifdef Q8_AVX2
// acc + 8 int32 sums of 4 products each: unsigned bytes u (Q4_1 codes) times signed bytes s
inline __m256i dot_u8s8(__m256i acc, __m256i u, __m256i s) {
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
  return _mm256_dpbusd_epi32(acc, u, s);
#elif defined(__AVXVNNI__)
  return _mm256_dpbusd_avx_epi32(acc, u, s);
#else  // (maddubs cannot saturate here: u is a 4-bit code, 2·15·128 < 32767)
  return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1)));
#endif
}

// acc + 8 int32 sums of 2 products each: int16 pairs w and x
inline __m256i dot_s16(__m256i acc, __m256i w, __m256i x) {
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
  return _mm256_dpwssd_epi32(acc, w, x);
#elif defined(__AVXVNNI__)
  return _mm256_dpwssd_avx_epi32(acc, w, x);
#else  // the same exact pair sums (|w·x| < 2^22: no wrap)
  return _mm256_add_epi32(acc, _mm256_madd_epi16(w, x));
#endif
}

#endif

// A Q4_1 layer's scales and mins are float32, or float16 where every one of them is exact in it
// (q8_dot.py pack_q4_1: the embedded model's are, fp16 in its GGUF; half the bytes). Both convert to
// the same float32 values, so the results do not depend on which.
inline float to_float(float v) { return v; }
inline float to_float(at::Half v) { return static_cast<float>(v); }

#ifdef Q8_AVX2
inline __m256 load8(const float* p) { return _mm256_loadu_ps(p); }
inline __m256 load8(const at::Half* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
#endif

// Weights are stored in tiles of output rows, block by block (q8_dot.py's pack_*): a tile's loop
// then reads one sequential stream. (Four rows read side by side at their own addresses ran at a
// third of the bandwidth of one row: four streams a few hundred bytes apart defeat the prefetcher.)
constexpr int ROWS = 8;  // an int8 matrix's tiles: one int32 lane per output row
constexpr int QROWS = 8;  // a Q4_1 layer's tiles: the same

// A tile of a Q4_1 layer: QROWS weight rows times MR rows of x, the output rows in the lanes of one
// vector (as ggml's repacked Q4_0x8 GEMM has them). w: the tile's nb/2 pairs of blocks, each 8
// groups of 32 bytes; group g's byte 4r+i = code 4g+i of row r's first block | that of its second
// block << 4. One dpbusd then takes 4 codes of all 8 rows against 4 bytes of x broadcast, a block's
// 8 of them sum its 32 products per row exactly (in int32), and one fma per block scales all 8 rows:
// the float work is per block and 8 rows, not per block and row (what made an M-row call cost M
// one-row calls). sc, mn: [nb][QROWS] scales and mins. out[m][r] = Σ_b sc_b·d_b·Σ(code·q) (chain f)
// + Σ_b mn_b·s_b (chain g), d_b and s_b being x's block scale and d_b·Σq. Each output's operations
// and their order depend only on its own rows of x and of weights, never on MR or on the other lanes.
template <int MR, typename S>
void tile_q4_1(const uint8_t* w, const S* sc, const S* mn, int64_t nb, const int8_t* xq, int64_t k,
               const float* xd, const float* xs, float* out, int64_t ostride) {
#ifdef Q8_AVX2
  const __m256i low = _mm256_set1_epi8(0x0F);
  __m256 f[MR], g[MR];
#pragma GCC unroll 4
  for (int m = 0; m < MR; ++m) f[m] = g[m] = _mm256_setzero_ps();
  for (int64_t p = 0; p < nb; p += 2, w += 8 * 32) {
    __m256i ia[MR], ib[MR];
#pragma GCC unroll 4
    for (int m = 0; m < MR; ++m) ia[m] = ib[m] = _mm256_setzero_si256();
    const int8_t* xa = xq + p * BLOCK;
#pragma GCC unroll 8
    for (int gi = 0; gi < 8; ++gi) {
      const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + gi * 32));
      const __m256i lo = _mm256_and_si256(v, low), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), low);
#pragma GCC unroll 4
      for (int m = 0; m < MR; ++m) {
        int32_t a4, b4;  // 4 bytes of x, as one int32 to broadcast
        std::memcpy(&a4, xa + m * k + 4 * gi, 4);
        std::memcpy(&b4, xa + m * k + BLOCK + 4 * gi, 4);
        ia[m] = dot_u8s8(ia[m], lo, _mm256_set1_epi32(a4));
        ib[m] = dot_u8s8(ib[m], hi, _mm256_set1_epi32(b4));
      }
    }
    const __m256 sa = load8(sc + p * QROWS), sb = load8(sc + (p + 1) * QROWS);
    const __m256 ma = load8(mn + p * QROWS), mb = load8(mn + (p + 1) * QROWS);
#pragma GCC unroll 4
    for (int m = 0; m < MR; ++m) {
      const float* d = xd + m * nb + p;
      const float* s = xs + m * nb + p;
      f[m] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(ia[m]), _mm256_mul_ps(sa, _mm256_set1_ps(d[0])), f[m]);
      f[m] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(ib[m]), _mm256_mul_ps(sb, _mm256_set1_ps(d[1])), f[m]);
      g[m] = _mm256_fmadd_ps(ma, _mm256_set1_ps(s[0]), g[m]);
      g[m] = _mm256_fmadd_ps(mb, _mm256_set1_ps(s[1]), g[m]);
    }
  }
#pragma GCC unroll 4
  for (int m = 0; m < MR; ++m) _mm256_storeu_ps(out + m * ostride, _mm256_add_ps(f[m], g[m]));
#else
  for (int m = 0; m < MR; ++m)
    for (int r = 0; r < QROWS; ++r) {
      const int8_t* xm = xq + m * k;
      float f = 0.0f, g = 0.0f;
      for (int64_t p = 0; p < nb; p += 2) {
        const uint8_t* wp = w + (p / 2) * 8 * 32 + 4 * r;
        int32_t ia = 0, ib = 0;  // (integer sums: exact in any order)
        for (int gi = 0; gi < 8; ++gi)
          for (int i = 0; i < 4; ++i) {
            const int c = wp[gi * 32 + i];
            ia += (c & 0x0F) * xm[p * BLOCK + 4 * gi + i];
            ib += (c >> 4) * xm[p * BLOCK + BLOCK + 4 * gi + i];
          }
        const float* d = xd + m * nb + p;
        const float* s = xs + m * nb + p;
        f = std::fma(static_cast<float>(ia), to_float(sc[p * QROWS + r]) * d[0], f);
        f = std::fma(static_cast<float>(ib), to_float(sc[(p + 1) * QROWS + r]) * d[1], f);
        g = std::fma(to_float(mn[p * QROWS + r]), s[0], g);
        g = std::fma(to_float(mn[(p + 1) * QROWS + r]), s[1], g);
      }
      out[m * ostride + r] = f + g;
    }
#endif
}

// A tile of an int8 matrix (the lm_head's codes; its row scales applied by the caller) times int16
// activations, with the output rows in the lanes as tile_q4_1 has them. w: per block of 32 inputs, 16
// groups of 16 bytes; group c's byte 2r+i = code 2c+i of row r. Sign-extended to int16, a group is one
// vector of 8 rows × 2 inputs, and one int16 dot product (vpdpwssd) takes both inputs of all 8 rows
// against a broadcast pair of x; a block's 32 products per row sum exactly in int32 (|w| <= 127,
// |x| <= 32767: under 2^27). Its conversion to float and one fma per block scale all 8 rows (the
// float32 rounding head.py's bound counts: one per block and the conversion, (blocks + 8)·2^-24).
// The 4-row tiles before this converted and scaled every 4 products of every row. NA independent
// integer chains per row keep the dot-product unit busy when few rows of x come (a decode step).
template <int MR>
void tile_q8(const int8_t* w, int64_t nb, const int16_t* xq, int64_t k, const float* xd, float* out,
             int64_t ostride) {
#ifdef Q8_AVX2
  constexpr int NA = MR == 1 ? 4 : 2;
  __m256 f[MR];
#pragma GCC unroll 4
  for (int m = 0; m < MR; ++m) f[m] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b, w += ROWS * BLOCK) {
    __m256i acc[MR][NA];
#pragma GCC unroll 4
    for (int m = 0; m < MR; ++m)
#pragma GCC unroll 4
      for (int a = 0; a < NA; ++a) acc[m][a] = _mm256_setzero_si256();
    const int16_t* xb = xq + b * BLOCK;
#pragma GCC unroll 16
    for (int c = 0; c < BLOCK / 2; ++c) {
      const __m256i wv = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w + 16 * c)));
#pragma GCC unroll 4
      for (int m = 0; m < MR; ++m) {
        int32_t pair;  // x's inputs 2c and 2c+1, as one int32 to broadcast
        std::memcpy(&pair, xb + m * k + 2 * c, 4);
        acc[m][c % NA] = dot_s16(acc[m][c % NA], wv, _mm256_set1_epi32(pair));
      }
    }
#pragma GCC unroll 4
    for (int m = 0; m < MR; ++m) {
      __m256i i = acc[m][0];
#pragma GCC unroll 4
      for (int a = 1; a < NA; ++a) i = _mm256_add_epi32(i, acc[m][a]);  // integers: exact in any order
      f[m] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(i), _mm256_set1_ps(xd[m * nb + b]), f[m]);
    }
  }
#pragma GCC unroll 4
  for (int m = 0; m < MR; ++m) _mm256_storeu_ps(out + m * ostride, f[m]);
#else
  for (int m = 0; m < MR; ++m)
    for (int r = 0; r < ROWS; ++r) {
      const int16_t* xm = xq + m * k;
      float f = 0.0f;
      for (int64_t b = 0; b < nb; ++b) {
        const int8_t* wb = w + b * ROWS * BLOCK;
        int32_t i = 0;  // (an integer sum: exact in any order)
        for (int c = 0; c < BLOCK / 2; ++c)
          for (int j = 0; j < 2; ++j) i += wb[16 * c + 2 * r + j] * xm[b * BLOCK + 2 * c + j];
        f = std::fma(static_cast<float>(i), xd[m * nb + b], f);
      }
      out[m * ostride + r] = f;
    }
#endif
}

// Runs fn(MR, i) over the rows of x in chunks of up to 4 (MR a compile-time constant).
template <typename Fn>
void for_row_chunks(int64_t m, Fn&& fn) {
  for (int64_t i = 0; i < m; i += 4) {
    switch (std::min<int64_t>(4, m - i)) {
      case 1: fn(std::integral_constant<int, 1>{}, i); break;
      case 2: fn(std::integral_constant<int, 2>{}, i); break;
      case 3: fn(std::integral_constant<int, 3>{}, i); break;
      default: fn(std::integral_constant<int, 4>{}, i); break;
    }
  }
}

struct QuantizedX {
  torch::Tensor q, d, s;
};

template <typename Q, int QMAX>
QuantizedX quantize(const torch::Tensor& x) {
  const int64_t m = x.size(0), k = x.size(1), nb = k / BLOCK;
  const auto dtype = sizeof(Q) == 1 ? torch::kChar : torch::kShort;
  QuantizedX r{torch::empty({m, k}, dtype), torch::empty({m, nb}, torch::kFloat), torch::empty({m, nb}, torch::kFloat)};
  const float* xp = x.data_ptr<float>();
  Q* qp = static_cast<Q*>(r.q.data_ptr());
  for (int64_t i = 0; i < m; ++i)
    quantize_row<Q, QMAX>(xp + i * k, k, qp + i * k, r.d.data_ptr<float>() + i * nb, r.s.data_ptr<float>() + i * nb);
  return r;
}

void check_x(const torch::Tensor& x, int64_t k) {
  TORCH_CHECK(x.dim() == 2 && x.scalar_type() == torch::kFloat && x.is_contiguous(), "x: [M, K] float32");
  TORCH_CHECK(x.size(1) == k, "x has ", x.size(1), " columns, the weights ", k);
}

// Tiles of output rows go to threads in chunks of this many: each output is one thread's, whole.
constexpr int64_t GRAIN = 16;

}  // namespace

namespace {

template <typename S>
torch::Tensor q4_1_run(const torch::Tensor& x, const torch::Tensor& codes, const torch::Tensor& scales,
                       const torch::Tensor& mins) {
  const int64_t tiles = codes.size(0), n = tiles * QROWS, k = codes.size(1) * 2 * BLOCK, nb = k / BLOCK;
  const int64_t m = x.size(0);
  const QuantizedX qx = quantize<int8_t, 127>(x);
  auto out = torch::empty({m, n}, torch::kFloat);
  const uint8_t* wp = codes.data_ptr<uint8_t>();
  const S* scp = scales.data_ptr<S>();
  const S* mnp = mins.data_ptr<S>();
  const int8_t* qp = qx.q.data_ptr<int8_t>();
  const float* dp = qx.d.data_ptr<float>();
  const float* sp = qx.s.data_ptr<float>();
  float* op = out.data_ptr<float>();
  at::parallel_for(0, tiles, GRAIN, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t)  // one tile of weights, every row of x (it stays in L1)
      for_row_chunks(m, [&](auto mr, int64_t i) {
        tile_q4_1<decltype(mr)::value, S>(wp + t * (k / 2) * QROWS, scp + t * nb * QROWS, mnp + t * nb * QROWS, nb,
                                          qp + i * k, k, dp + i * nb, sp + i * nb, op + i * n + t * QROWS, n);
      });
  });
  return out;
}

}  // namespace

// x: [M, K] float32; codes: [N/8, K/64, 8, 32] uint8, scales and mins: [N/8, K/32, 8] float32 or
// both float16, as q8_dot.pack_q4_1 lays them out. Returns x @ Wᵀ [M, N] float32, W = scale·code +
// min per block of 32.
inline torch::Tensor q4_1_linear(torch::Tensor x, torch::Tensor codes, torch::Tensor scales, torch::Tensor mins) {
  TORCH_CHECK(codes.dim() == 4 && codes.size(2) == 8 && codes.size(3) == 32 &&
              codes.scalar_type() == torch::kByte && codes.is_contiguous(), "codes: [N/8, K/64, 8, 32] uint8");
  const int64_t tiles = codes.size(0), k = codes.size(1) * 2 * BLOCK, nb = k / BLOCK;
  const bool half = scales.scalar_type() == torch::kHalf;
  for (const auto* t : {&scales, &mins})
    TORCH_CHECK(t->dim() == 3 && t->size(0) == tiles && t->size(1) == nb && t->size(2) == QROWS &&
                t->scalar_type() == (half ? torch::kHalf : torch::kFloat) && t->is_contiguous(),
                "scales and mins: [N/8, K/32, 8], both float32 or both float16");
  check_x(x, k);
  return half ? q4_1_run<at::Half>(x, codes, scales, mins) : q4_1_run<float>(x, codes, scales, mins);
}

// x: [M, K] float32; codes: [N/8, K/32, 16, 16] int8 (q8_dot.pack_q8); scales: [N] float32. Returns
// x @ (scales·codes)ᵀ [M, N] float32, x quantized to int8 in blocks of 32 (head.py bounds the error).
inline torch::Tensor q8_linear(torch::Tensor x, torch::Tensor codes, torch::Tensor scales) {
  TORCH_CHECK(codes.dim() == 4 && codes.size(2) == BLOCK / 2 && codes.size(3) == 2 * ROWS &&
              codes.scalar_type() == torch::kChar && codes.is_contiguous(), "codes: [N/8, K/32, 16, 16] int8");
  const int64_t tiles = codes.size(0), n = tiles * ROWS, nb = codes.size(1), k = nb * BLOCK;
  TORCH_CHECK(scales.dim() == 1 && scales.size(0) == n && scales.scalar_type() == torch::kFloat &&
              scales.is_contiguous(), "scales: [N] float32");
  check_x(x, k);
  const int64_t m = x.size(0);
  const QuantizedX qx = quantize<int16_t, 32767>(x);
  auto out = torch::empty({m, n}, torch::kFloat);
  const int8_t* wp = codes.data_ptr<int8_t>();
  const float* scp = scales.data_ptr<float>();
  const int16_t* qp = qx.q.data_ptr<int16_t>();
  const float* dp = qx.d.data_ptr<float>();
  float* op = out.data_ptr<float>();
  at::parallel_for(0, tiles, GRAIN, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t)
      for_row_chunks(m, [&](auto mr, int64_t i) {
        tile_q8<decltype(mr)::value>(wp + t * k * ROWS, nb, qp + i * k, k, dp + i * nb, op + i * n + t * ROWS, n);
      });
    for (int64_t i = 0; i < m; ++i)  // the row scales, after the sums
      for (int64_t j = begin * ROWS; j < end * ROWS; ++j) op[i * n + j] *= scp[j];
  });
  return out;
}

// The activation quantization alone (tests, head.py's bound): codes [M, K] (int8 as q4_1_linear
// takes them, or int16 as q8_linear does), scales [M, K/32] float32.
inline std::vector<torch::Tensor> quantize_activations(torch::Tensor x, int64_t bits) {
  TORCH_CHECK(x.dim() == 2 && x.size(1) % BLOCK == 0, "x: [M, K] with K a multiple of 32");
  TORCH_CHECK(bits == 8 || bits == 16, "bits: 8 (q4_1_linear's) or 16 (q8_linear's)");
  check_x(x, x.size(1));
  const QuantizedX qx = bits == 8 ? quantize<int8_t, 127>(x) : quantize<int16_t, 32767>(x);
  return {qx.q, qx.d};
}

// Which code path this build runs: "avx2-vnni", "avx2" or "generic" (plain loops: correct anywhere,
// and slower than torch's kernels, so q8_dot.py uses them only when told to, for the tests).
inline std::string simd() {
#if defined(Q8_AVX2) && ((defined(__AVX512VNNI__) && defined(__AVX512VL__)) || defined(__AVXVNNI__))
  return "avx2-vnni";
#elif defined(Q8_AVX2)
  return "avx2";
#else
  return "generic";
#endif
}
