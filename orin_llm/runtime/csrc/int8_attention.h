// Decode attention straight over an INT8 KV cache (CPU): see orin_llm/runtime/int8_attention.py.
//
// One call per layer and sequence replaces the gather + int8->float copy of every cached K/V, the
// scale multiplies and SDPA (about ten torch ops a layer, most of a decode step's attention time).
// Each query row is computed on its own, in one fixed order that depends only on its q row and its
// keys: a verify step's row t is bit for bit a one-token decode step at that position, whatever
// else is in the call. That is what keeps greedy speculation exactly lossless (llama.py Step.exact).
// On CPUs with AVX-512 the scores' key loop is written with intrinsics (scores_avx512): the same
// sums in the same order, with one reduction per 16 keys; ORIN_LLM_ATTN_GENERIC builds the portable
// loops (the tests compare the two). Partial sums run in LANES independent lanes, reduced in a fixed
// tree, so the compiler vectorizes them without -ffast-math (which would let it reorder, and so change, the sums); -fno-trapping-math
// (results unchanged: no FP exception is ever looked at) lets it vectorize the clamp in the exp.
#pragma once

#include <torch/extension.h>

#include "attention_args.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace {

constexpr int LANES = 16;

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

#if defined(__AVX512F__) && !defined(ORIN_LLM_ATTN_GENERIC)
#include <immintrin.h>
#define ATTN_AVX512 1

// 16 vectors of 16 partial sums (one per key) → one vector of their 16 sums, in key order. Each
// key's 16 lanes are added in one fixed tree (lanes l and l+8, then l and l+4, ...), whatever the
// other keys hold: a key's score does not depend on which keys share its block.
inline __m512 reduce16(__m512* v) {
  __m512 w[8], x[4], y[2];
  for (int j = 0; j < 8; ++j)  // 256-bit halves: [key 2j: 8 | key 2j+1: 8]
    w[j] = _mm512_add_ps(_mm512_shuffle_f32x4(v[2 * j], v[2 * j + 1], 0x44),
                         _mm512_shuffle_f32x4(v[2 * j], v[2 * j + 1], 0xEE));
  for (int j = 0; j < 4; ++j)  // 128-bit lanes: keys 4j .. 4j+3, 4 each
    x[j] = _mm512_add_ps(_mm512_shuffle_f32x4(w[2 * j], w[2 * j + 1], 0x88),
                         _mm512_shuffle_f32x4(w[2 * j], w[2 * j + 1], 0xDD));
  for (int j = 0; j < 2; ++j)  // lane k: [key 8j+k: 2 | key 8j+4+k: 2]
    y[j] = _mm512_add_ps(_mm512_shuffle_ps(x[2 * j], x[2 * j + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                         _mm512_shuffle_ps(x[2 * j], x[2 * j + 1], _MM_SHUFFLE(3, 2, 3, 2)));
  // lane k: [key k, key 4+k, key 8+k, key 12+k]
  const __m512 z = _mm512_add_ps(_mm512_shuffle_ps(y[0], y[1], _MM_SHUFFLE(2, 0, 2, 0)),
                                 _mm512_shuffle_ps(y[0], y[1], _MM_SHUFFLE(3, 1, 3, 1)));
  // element 4k+m holds key 4m+k: back to key order
  const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  return _mm512_permutexvar_ps(order, z);
}

// scores[h·n + i] = qs_h · k_i for every head h and key i. Per key, each head's 16-lane partials run
// in one fixed order over D; blocks of 16 keys then share one reduction (reduce16) where a
// horizontal sum per key and head was most of the loop. Keys past n in the last block are zeros.
template <int D, int G>
void scores_avx512(const float* qs, const int8_t* k, const int64_t* slots, int64_t n, float* scores) {
  constexpr int C = D / 16;
  __m512 qv[G][C];
  for (int h = 0; h < G; ++h)
    for (int c = 0; c < C; ++c) qv[h][c] = _mm512_loadu_ps(qs + h * D + c * 16);
  __m512 part[G][16];
  for (int64_t i0 = 0; i0 < n; i0 += 16) {
    const int cnt = static_cast<int>(std::min<int64_t>(16, n - i0));
    for (int i = 0; i < 16; ++i) {
      if (i >= cnt) {
        for (int h = 0; h < G; ++h) part[h][i] = _mm512_setzero_ps();
        continue;
      }
      const int8_t* kr = k + slots[i0 + i] * D;
      __m512 kv[C];
      for (int c = 0; c < C; ++c)
        kv[c] = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kr + c * 16))));
      for (int h = 0; h < G; ++h) {
        __m512 p = _mm512_mul_ps(qv[h][0], kv[0]);
        for (int c = 1; c < C; ++c) p = _mm512_fmadd_ps(qv[h][c], kv[c], p);
        part[h][i] = p;
      }
    }
    for (int h = 0; h < G; ++h) {
      const __m512 r = reduce16(part[h]);
      if (cnt == 16) {
        _mm512_storeu_ps(scores + h * n + i0, r);
      } else {
        _mm512_mask_storeu_ps(scores + h * n + i0, static_cast<__mmask16>((1u << cnt) - 1), r);
      }
    }
  }
}
#endif

// One query's heads of one KV head (G of them: GQA) over keys slots[0 .. n). G and D are compile-time
// constants so that q and the output accumulators stay in registers across the key loops (with a
// runtime g they lived in memory: a load and a store per key and head, 2.5x the time over 4k keys).
// The arithmetic is the same whatever G is: each head's sums run in the same order.
template <int D, int G>
void attend_one(const float* q, const int8_t* k, const int8_t* v, const int64_t* slots, int64_t n,
                float q_mul, float v_mul, float* out, std::vector<float>& buf) {
  constexpr int64_t g = G;
  buf.resize(static_cast<size_t>(g * n));
  float* scores = buf.data();  // [g, n]
  float qs[G * D];  // q with the K scale and 1/sqrt(D) folded in
  for (int64_t h = 0; h < g * D; ++h) qs[h] = q[h] * q_mul;
#ifdef ATTN_AVX512
  scores_avx512<D, G>(qs, k, slots, n, scores);
#else
  for (int64_t i = 0; i < n; ++i) {
    const int8_t* kr = k + slots[i] * D;
    float kf[D];
    for (int c = 0; c < D; ++c) kf[c] = static_cast<float>(kr[c]);
    for (int64_t h = 0; h < g; ++h) {
      const float* qh = qs + h * D;
      float part[LANES] = {0};
      for (int c0 = 0; c0 < D; c0 += LANES)
        for (int l = 0; l < LANES; ++l) part[l] += qh[c0 + l] * kf[c0 + l];
      scores[h * n + i] = lane_sum(part);
    }
  }
#endif
  float inv_sum[G];
  for (int64_t h = 0; h < g; ++h) {
    float* s = scores + h * n;
    float top[LANES];
    for (int l = 0; l < LANES; ++l) top[l] = s[0];
    int64_t i = 0;
    for (; i + LANES <= n; i += LANES)
      for (int l = 0; l < LANES; ++l) top[l] = top[l] < s[i + l] ? s[i + l] : top[l];
    for (; i < n; ++i) top[0] = top[0] < s[i] ? s[i] : top[0];
    float m = top[0];
    for (int l = 1; l < LANES; ++l) m = m < top[l] ? top[l] : m;  // (max is exact: order is free)
    for (int64_t j = 0; j < n; ++j) s[j] = exp_nonpositive(s[j] - m);
    float part[LANES] = {0};
    for (i = 0; i + LANES <= n; i += LANES)
      for (int l = 0; l < LANES; ++l) part[l] += s[i + l];
    for (; i < n; ++i) part[i % LANES] += s[i];
    inv_sum[h] = v_mul / lane_sum(part);
  }
  float acc[D * G];
  for (int64_t c = 0; c < g * D; ++c) acc[c] = 0.0f;
  for (int64_t j = 0; j < n; ++j) {
    const int8_t* vr = v + slots[j] * D;
    float vf[D];
    for (int c = 0; c < D; ++c) vf[c] = static_cast<float>(vr[c]);
    for (int64_t h = 0; h < g; ++h) {
      const float p = scores[h * n + j];
      float* a = acc + h * D;
      for (int c = 0; c < D; ++c) a[c] += p * vf[c];
    }
  }
  for (int64_t h = 0; h < g; ++h)
    for (int c = 0; c < D; ++c) out[h * D + c] = acc[h * D + c] * inv_sum[h];
}


}  // namespace

// q: [T, H, D] float32 (after RoPE, unscaled); k, v: [KV, S, D] int8, one layer of the cache;
// slots: int64, the slots of positions 0 .. pos+T-1; k_scale, v_scale: [KV] float32.
// Query t sees positions 0 .. pos+t. Returns [T, H, D] float32: softmax(q·kᵀ/√D)·v in real units.
inline torch::Tensor int8_decode_attention(torch::Tensor q, torch::Tensor k, torch::Tensor v, torch::Tensor slots,
                                    int64_t pos, torch::Tensor k_scale, torch::Tensor v_scale) {
  const AttentionArgs a = check_attention_args(q, k, v, slots, pos, k_scale, v_scale);
  const int64_t t = a.t, h = a.h, d = a.d, kv = a.kv, cap = a.cap;
  const torch::Tensor &ks = a.ks, &vs = a.vs;
  const int64_t* sl = slots.data_ptr<int64_t>();
  auto out = torch::empty_like(q);
  const int64_t g = h / kv;
  const float inv = 1.0f / std::sqrt(static_cast<float>(d));
  const float* qp = q.data_ptr<float>();
  float* op = out.data_ptr<float>();
  const int8_t* kp = k.data_ptr<int8_t>();
  const int8_t* vp = v.data_ptr<int8_t>();
  const float* ksp = ks.data_ptr<float>();
  const float* vsp = vs.data_ptr<float>();
  const auto fn = by_shape(d, g, [](auto D, auto G) { return &attend_one<decltype(D)::value, decltype(G)::value>; });
  at::parallel_for(0, t * kv, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> buf;
    for (int64_t w = begin; w < end; ++w) {
      const int64_t ti = w / kv, j = w % kv;
      const int64_t at_ = (ti * h + j * g) * d;
      fn(qp + at_, kp + j * cap * d, vp + j * cap * d, sl, pos + ti + 1, ksp[j] * inv, vsp[j], op + at_, buf);
    }
  });
  return out;
}
