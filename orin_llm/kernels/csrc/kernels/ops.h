// The ops' cores, without torch: whole ranges of work (tiles of output rows, attention work items)
// on raw pointers, templated on the kernels that run them (dispatch.h picks them for this build;
// tests/native/kernels_test.cpp runs the reference and this CPU's side by side). ops.cpp wraps
// them for torch: argument checks, tensors, threads (at::parallel_for over these ranges).
#pragma once

#include "common.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "x86.h"

namespace orin {

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

// x's m rows [m, k] to integer codes per block of 32 (quantize_row): q [m, k], d and s [m, k/32].
template <typename Q, int QMAX>
void quantize_rows(const float* x, int64_t m, int64_t k, Q* q, float* d, float* s) {
  const int64_t nb = k / BLOCK;
  for (int64_t i = 0; i < m; ++i) quantize_row<Q, QMAX>(x + i * k, k, q + i * k, d + i * nb, s + i * nb);
}

// x's m rows [m, k] to the Q4_1 layers' split 16-bit codes (quantize_row_split): hl [m, 2k] (each
// row's hi plane, then its lo plane), d and s [m, k/32].
inline void quantize_rows_split(const float* x, int64_t m, int64_t k, int8_t* hl, float* d, float* s) {
  const int64_t nb = k / BLOCK;
  for (int64_t i = 0; i < m; ++i) quantize_row_split(x + i * k, k, hl + i * 2 * k, d + i * nb, s + i * nb);
}

// Every output of a Q4_1 layer's tiles [t0, t1) for m rows of x in split 16-bit codes (xq [m, 2k],
// xd, xs: quantize_rows_split): out [m, n]. codes [n/8, k/64, 8, 32], scales and mins [n/8, k/32, 8]
// (q8_dot.py pack_q4_1). One tile of weights, every row of x (it stays in L1).
template <class K, typename S>
void q4_1_tiles(const uint8_t* codes, const S* scales, const S* mins, int64_t n, int64_t k, const int8_t* xq,
                const float* xd, const float* xs, int64_t m, int64_t t0, int64_t t1, float* out) {
  const int64_t nb = k / BLOCK;
  for (int64_t t = t0; t < t1; ++t)
    for_row_chunks(m, [&](auto mr, int64_t i) {
      K::template tile_q4_1<decltype(mr)::value, S>(codes + t * (k / 2) * QROWS, scales + t * nb * QROWS,
                                                     mins + t * nb * QROWS, nb, xq + i * 2 * k, k, xd + i * nb,
                                                     xs + i * nb, out + i * n + t * QROWS, n);
    });
}

// The same for an int8 matrix's tiles (codes [n/8, k/32, 16, 16], q8_dot.py pack_q8) and m rows of
// x quantized to int16 (quantize_rows<int16_t, 32767>), then its row scales, after the sums.
template <class K>
void q8_tiles(const int8_t* codes, const float* row_scales, int64_t n, int64_t k, const int16_t* xq,
              const float* xd, int64_t m, int64_t t0, int64_t t1, float* out) {
  const int64_t nb = k / BLOCK;
  for (int64_t t = t0; t < t1; ++t)
    for_row_chunks(m, [&](auto mr, int64_t i) {
      K::template tile_q8<decltype(mr)::value>(codes + t * k * ROWS, nb, xq + i * k, k, xd + i * nb,
                                               out + i * n + t * ROWS, n);
    });
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = t0 * ROWS; j < t1 * ROWS; ++j) out[i * n + j] *= row_scales[j];
}

// One layer of the INT8 cache and the queries that attend over it (both attention ops).
// q: [t, h, d] float32 (after RoPE, unscaled), queries at positions pos .. pos+t-1; k, v: [kv, cap, d]
// int8; slots: the cache rows of positions 0 .. pos+t-1; k_scale, v_scale: [kv]; out: [t, h, d].
// Query i sees positions 0 .. pos+i.
struct AttentionView {
  const float* q;
  const int8_t* k;
  const int8_t* v;
  const int64_t* slots;
  const float* k_scale;
  const float* v_scale;
  int64_t t, h, d, kv, cap, pos;
  float* out;
};

// fn(D, G) with D, the head size (HEAD_DIM_A or _B), and G, the query heads per KV head (1 ..
// MAX_GROUP), as compile-time constants: the attention kernels are templates on them, so that q and
// the accumulators stay in registers. d and g are checked by the callers.
template <typename Fn>
auto by_shape(int64_t d, int64_t g, Fn&& fn) {
  auto with_g = [&](auto D) {
    switch (g) {
      case 1: return fn(D, std::integral_constant<int, 1>{});
      case 2: return fn(D, std::integral_constant<int, 2>{});
      case 3: return fn(D, std::integral_constant<int, 3>{});
      case 4: return fn(D, std::integral_constant<int, 4>{});
      case 5: return fn(D, std::integral_constant<int, 5>{});
      case 6: return fn(D, std::integral_constant<int, 6>{});
      case 7: return fn(D, std::integral_constant<int, 7>{});
      default: return fn(D, std::integral_constant<int, 8>{});
    }
  };
  return d == HEAD_DIM_A ? with_g(std::integral_constant<int, HEAD_DIM_A>{})
                         : with_g(std::integral_constant<int, HEAD_DIM_B>{});
}
static_assert(MAX_GROUP == 8, "by_shape instantiates G = 1 .. 8");

// Decode attention (kernels/int8_attention.py). Each query row is computed on its own, in one fixed
// order that depends only on its q row and its keys: a verify step's row t is bit for bit a
// one-token decode step at that position, whatever else is in the call (what keeps greedy
// speculation exactly lossless). Partial sums run in LANES independent lanes, reduced in a fixed
// tree, so the compiler vectorizes them without -ffast-math (which would let it reorder, and so
// change, the sums); -fno-trapping-math (results unchanged: no FP exception is ever looked at) lets
// it vectorize the clamp in the exp. K's scores() is the only part that differs between kernels.
// One query's heads of one KV head (G of them: GQA) over keys slots[0 .. n). G and D are compile-time
// constants so that q and the output accumulators stay in registers across the key loops (with a
// runtime g they lived in memory: a load and a store per key and head, 2.5x the time over 4k keys).
// The arithmetic is the same whatever G is: each head's sums run in the same order.
template <class K, int D, int G>
void attend_one(const float* q, const int8_t* k, const int8_t* v, const int64_t* slots, int64_t n,
                float q_mul, float v_mul, float* out, std::vector<float>& buf) {
  constexpr int64_t g = G;
  buf.resize(static_cast<size_t>(g * n));
  float* scores = buf.data();  // [g, n]
  float qs[G * D];  // q with the K scale and 1/sqrt(D) folded in
  for (int64_t h = 0; h < g * D; ++h) qs[h] = q[h] * q_mul;
  K::template scores<D, G>(qs, k, slots, n, scores);
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


// Decode attention's work items [w0, w1) of t·kv (query, KV head): a.out's rows for them.
template <class K>
void decode_attention_items(const AttentionView& a, int64_t w0, int64_t w1) {
  const int64_t g = a.h / a.kv;
  const float inv = 1.0f / std::sqrt(static_cast<float>(a.d));
  const auto fn = by_shape(a.d, g, [](auto D, auto G) { return &attend_one<K, decltype(D)::value, decltype(G)::value>; });
  std::vector<float> buf;
  for (int64_t w = w0; w < w1; ++w) {
    const int64_t ti = w / a.kv, j = w % a.kv;
    const int64_t at = (ti * a.h + j * g) * a.d;
    fn(a.q + at, a.k + j * a.cap * a.d, a.v + j * a.cap * a.d, a.slots, a.pos + ti + 1, a.k_scale[j] * inv,
       a.v_scale[j], a.out + at, buf);
  }
}

inline int64_t decode_attention_work(const AttentionView& a) { return a.t * a.kv; }

#ifdef ORIN_X86_PREFILL
// Prompt attention (kernels/prefill_attention.py): work items are (group of at most QPOS query
// positions, KV head). Groups are as even as they can be (20 queries: 10 + 10, not 16 + 4: equal
// work items for the threads, and no small group paying a whole group's key conversions), the
// later groups (more keys) first.
inline int64_t prefill_groups(int64_t t) { return (t + QPOS - 1) / QPOS; }
inline int64_t prefill_attention_work(const AttentionView& a) { return prefill_groups(a.t) * a.kv; }

inline void prefill_attention_items(const AttentionView& a, int64_t w0, int64_t w1) {
  const int64_t g = a.h / a.kv, groups = prefill_groups(a.t), per = (a.t + groups - 1) / groups;
  const float inv = 1.0f / std::sqrt(static_cast<float>(a.d));
  const auto fn = by_shape(a.d, g, [](auto D, auto G) {
    return &x86_prefill::attend_group<decltype(D)::value, decltype(G)::value>;
  });
  for (int64_t w = w0; w < w1; ++w) {
    const int64_t gi = groups - 1 - w / a.kv, j = w % a.kv;
    const int64_t t0 = gi * per;
    const int nq = static_cast<int>(std::min<int64_t>(per, a.t - t0));
    if (nq <= 0) continue;
    const int64_t at = (t0 * a.h + j * g) * a.d;
    fn(a.q + at, a.h * a.d, nq, a.pos + t0, a.k + j * a.cap * a.d, a.v + j * a.cap * a.d, a.slots,
       a.k_scale[j] * inv, a.v_scale[j], a.out + at);
  }
}
#endif

}  // namespace orin
