// What every kernel shares, without torch (the kernel cores cross-compile and run in
// tests/native/kernels_test.cpp): the tile and block constants the Python side packs for (exposed
// by the module and checked at load: kernels/native.py), half floats, the activation quantization
// and the scalar helpers (sums in a fixed tree, exp, the decode layer's small ops).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

namespace orin {

constexpr int BLOCK = 32;  // weights (and activations) per scale: a GGUF block
// Weights are stored in tiles of output rows, block by block (q8_dot.py's pack_*): a tile's loop
// then reads one sequential stream. (Four rows read side by side at their own addresses ran at a
// third of the bandwidth of one row: four streams a few hundred bytes apart defeat the prefetcher.)
constexpr int ROWS = 8;   // an int8 matrix's tiles: one int32 lane per output row
constexpr int QROWS = 8;  // a Q4_1 layer's tiles: the same
constexpr int HEAD_DIM_A = 64, HEAD_DIM_B = 128;  // the head sizes the attention ops are compiled for
constexpr int MAX_GROUP = 8;  // query heads per KV head, at most (GQA)
constexpr int LANES = 16;     // independent partial sums of the attention and norm loops
constexpr int QPOS = 16;      // the prompt op's query positions per work item
constexpr int KT = 16;        // the prompt op's keys per tile
constexpr int64_t GRAIN = 16;  // tiles of output rows per thread chunk: each output is one thread's

// An IEEE half as stored (a GGUF's Q4_1 scales and mins, q8_dot.py pack_q4_1): the same two bytes
// as at::Half, converted exactly.
struct half16 {
  uint16_t bits;
};

inline float to_float(float v) { return v; }
inline float to_float(half16 h) {
  const uint32_t sign = static_cast<uint32_t>(h.bits & 0x8000u) << 16;
  uint32_t exp = (h.bits >> 10) & 0x1Fu, man = h.bits & 0x3FFu, bits;
  if (exp == 0x1F) {
    bits = sign | 0x7F800000u | (man << 13);
  } else if (exp != 0) {
    bits = sign | ((exp + 112) << 23) | (man << 13);
  } else if (man == 0) {
    bits = sign;
  } else {  // subnormal: normalize
    int e = -1;
    do {
      ++e;
      man <<= 1;
    } while (!(man & 0x400u));
    bits = sign | (static_cast<uint32_t>(112 - e) << 23) | ((man & 0x3FFu) << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// One row of x ([K] float32) to integer codes in blocks of 32: d = amax/QMAX, q = round(x/d) (ties
// to even, as torch.round; x times the float32 reciprocal, as tests/runtime/test_q8_dot.py redoes it),
// and per block d and d·Σq (what a Q4_1 block's min multiplies); store(i, q) keeps code i.
template <int QMAX, typename Store>
void quantize_row_with(const float* x, int64_t k, Store&& store, float* d, float* s) {
  for (int64_t b = 0; b < k / BLOCK; ++b) {
    const float* xb = x + b * BLOCK;
    float amax = 0.0f;
    for (int i = 0; i < BLOCK; ++i) amax = std::fmax(amax, std::fabs(xb[i]));
    const float db = amax / static_cast<float>(QMAX);
    const float id = db > 0.0f ? 1.0f / db : 0.0f;
    int sum = 0;
    for (int i = 0; i < BLOCK; ++i) {
      const int v = static_cast<int>(std::nearbyint(xb[i] * id));
      store(b * BLOCK + i, v);
      sum += v;
    }
    d[b] = db;
    s[b] = db * static_cast<float>(sum);
  }
}

// int16 codes (QMAX 32767) for int8 weights, whose main use is the lm_head's candidate pass: its
// exactness bound grows with the activations' rounding (head.py), and int8 activations left
// hundreds of candidates a row where int16 leaves a handful.
template <typename Q, int QMAX>
void quantize_row(const float* x, int64_t k, Q* q, float* d, float* s) {
  quantize_row_with<QMAX>(x, k, [q](int64_t i, int v) { q[i] = static_cast<Q>(v); }, d, s);
}

// The Q4_1 layers' activations: 16-bit codes (QMAX SPLIT_QMAX) held as two int8 planes, hi [K] then
// lo [K], q = 256·hi + lo, so that the byte dot products (dpbusd, sdot) take both and the two sums
// combine exactly in int32 (256·Σc·hi + Σc·lo). Why not int8 codes (llama.cpp's Q8_1, what ran here
// first): their rounding moves a small model's logprobs by more than the margin of many of its
// greedy choices (the README's question got a wrong answer; docs/BENCHMARKS.md, kernel quality);
// 16-bit codes round below bf16, for twice the byte dot products.
// hi = floor((q + 128) / 256) stays within ±127 for |q| <= SPLIT_QMAX, lo within [-128, 127].
constexpr int SPLIT_QMAX = 127 * 256 + 127;
inline void quantize_row_split(const float* x, int64_t k, int8_t* hl, float* d, float* s) {
  quantize_row_with<SPLIT_QMAX>(x, k, [hl, k](int64_t i, int v) {
    const int hi = (v + 128) >> 8;  // (an arithmetic shift: floor, for negative v too)
    hl[i] = static_cast<int8_t>(hi);
    hl[k + i] = static_cast<int8_t>(v - 256 * hi);
  }, d, s);
}

// The sum of LANES partial sums in one fixed tree (lanes l and l+8, then l and l+4, ...): the SIMD
// reductions (x86 reduce16, NEON's pairwise adds) add in the same tree, so the sums are the same.
inline float lane_sum(const float* a) {
  float b[LANES / 2];
  for (int l = 0; l < LANES / 2; ++l) b[l] = a[l] + a[l + LANES / 2];
  for (int w = LANES / 4; w >= 1; w /= 2)
    for (int l = 0; l < w; ++l) b[l] += b[l + w];
  return b[0];
}

// exp(x) for x <= 0 (scores minus their row's max): Cephes' expf polynomial, branch-free so that a
// loop of it vectorizes; within 2 ulp of expf over the range, 0 below -87.
inline float exp_nonpositive(float x) {
  x = x < -87.0f ? -87.0f : x;
  const int n = static_cast<int>(x * 1.44269504088896341f - 0.5f);  // round(x / ln 2), x <= 0
  const float nf = static_cast<float>(n);
  const float r = (x - nf * 0.693359375f) - nf * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float e = p * r * r + r + 1.0f;
  return e * __builtin_bit_cast(float, static_cast<uint32_t>(n + 127) << 23);  // 2^n
}

// The decode layer's small ops (decode_layer in ops.cpp), one row at a time.

// x · rsqrt(mean(x²) + eps) · w, one row: squares summed in LANES lanes, then a fixed tree.
inline void rms_norm(const float* x, const float* w, int64_t d, float eps, float* out) {
  float part[LANES] = {0};
  int64_t i = 0;
  for (; i + LANES <= d; i += LANES)
    for (int l = 0; l < LANES; ++l) part[l] += x[i + l] * x[i + l];
  for (; i < d; ++i) part[i % LANES] += x[i] * x[i];
  const float r = 1.0f / std::sqrt(lane_sum(part) / static_cast<float>(d) + eps);
  for (i = 0; i < d; ++i) out[i] = w[i] * (x[i] * r);
}

// RoPE on `heads` consecutive head vectors of one row: x·cos + [x2, x1]·sin, sin's first half
// negated (llama.py rope_tables), so this is HF's rotate_half form.
inline void rope(float* x, int64_t heads, int64_t d, const float* cos, const float* sin) {
  const int64_t half = d / 2;
  float tmp[HEAD_DIM_B];
  for (int64_t h = 0; h < heads; ++h) {
    float* v = x + h * d;
    for (int64_t c = 0; c < d; ++c) tmp[c] = v[c];
    for (int64_t c = 0; c < d; ++c) {
      const float a = tmp[c] * cos[c];
      const float b = tmp[c < half ? c + half : c - half] * sin[c];
      v[c] = a + b;
    }
  }
}

// q = clamp(round(x / scale), -127, 127): the same as kv_pool / kv_cache's torch ops, bit for bit
// (IEEE division, ties to even).
inline int8_t quantize_kv(float x, float scale) {
  float q = std::nearbyint(x / scale);
  q = q < -127.0f ? -127.0f : (q > 127.0f ? 127.0f : q);
  return static_cast<int8_t>(q);
}

// SiLU(gate) · up
inline float silu_mul(float g, float u) { return g / (1.0f + std::exp(-g)) * u; }

}  // namespace orin
