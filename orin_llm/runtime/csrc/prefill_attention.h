// Prompt attention straight over an INT8 KV cache (CPUs with AVX-512 VNNI and BF16): see
// orin_llm/runtime/prefill_attention.py. (Its Python module: prefill_attention.cpp; decode_layer.cpp runs it too.)
//
// A warm request's new tokens attend over the whole cached home: at 4k keys that was most of its
// time to first token, spent in torch's bf16 GEMMs, a bf16 softmax and copies (the int8 K/V gathered
// and converted per layer). This reads the cache through the sequence's slots and does all of it in
// one call per layer:
//   - scores: q rounded to int16 per row (amax/32767: 2^-15 of the row's largest element, where the
//     bf16 GEMM's q kept 8 bits), times the int8 keys in int16 dot products (vpdpwssd): each score
//     an exact integer sum, times one float scale;
//   - softmax in float32 (max, exp, and a fixed-order sum);
//   - probabilities rounded to bf16 (as the GEMM path's were), times the int8 values (exact in bf16)
//     in bf16 dot products (vdpbf16ps) with float32 sums, divided by the sum of the rounded weights.
// Each query row's result depends only on its own q row and its keys 0 .. its position, computed in
// one fixed order whatever other rows share the call: a prompt block's K/V are then the same whether
// it came in this chunk or another, cached before it or not (llama.py Item), and rows do not depend
// on the batch.
#pragma once

#include <torch/extension.h>

#include "attention_args.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VNNI__) && defined(__AVX512BF16__)
#include <immintrin.h>
#define PREFILL_SIMD 1
#endif

namespace {

constexpr int QPOS = 16;  // query positions per work item: G·16 rows share each key tile
constexpr int KT = 16;    // keys per tile: one vector of scores

#ifdef PREFILL_SIMD
// exp(x) for x <= 0, 16 lanes: Cephes' expf polynomial (as int8_attention.h's scalar one), within a
// few ulp; 0 below -87 is not needed here (masked keys are zeroed by the caller)
inline __m512 exp512(__m512 x) {
  x = _mm512_max_ps(x, _mm512_set1_ps(-87.0f));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  const __m512 e = _mm512_fmadd_ps(_mm512_mul_ps(p, r), r, _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  return _mm512_scalef_ps(e, n);  // e · 2^n
}

// 16 vectors of 16 int32 → their transpose (vector c = element c of each input, in input order)
inline void transpose16(__m512i* r) {
  __m512i t[16];
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
  }
  __m512i u[16];  // u[4i+e], 128-bit lane L: inputs 4i .. 4i+3 at element 4L+e
  for (int i = 0; i < 4; ++i) {
    u[4 * i + 0] = _mm512_unpacklo_epi64(t[4 * i + 0], t[4 * i + 2]);
    u[4 * i + 1] = _mm512_unpackhi_epi64(t[4 * i + 0], t[4 * i + 2]);
    u[4 * i + 2] = _mm512_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
    u[4 * i + 3] = _mm512_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
  }
  for (int e = 0; e < 4; ++e) {  // a 4x4 transpose of 128-bit lanes
    const __m512i x0 = _mm512_shuffle_i32x4(u[e], u[4 + e], 0x44), x1 = _mm512_shuffle_i32x4(u[e], u[4 + e], 0xEE);
    const __m512i y0 = _mm512_shuffle_i32x4(u[8 + e], u[12 + e], 0x44), y1 = _mm512_shuffle_i32x4(u[8 + e], u[12 + e], 0xEE);
    r[e] = _mm512_shuffle_i32x4(x0, y0, 0x88);
    r[4 + e] = _mm512_shuffle_i32x4(x0, y0, 0xDD);
    r[8 + e] = _mm512_shuffle_i32x4(x1, y1, 0x88);
    r[12 + e] = _mm512_shuffle_i32x4(x1, y1, 0xDD);
  }
}

// One KV head's rows: `nq` query positions from `pos0` (each row sees keys 0 .. its position), G
// heads each. q: this group's first head of the first position; qstride: floats from one position
// to the next (H·D). k, v: this KV head's [S, D] int8 cache; slots: positions → cache rows.
template <int D, int G>
void attend_group(const float* q, int64_t qstride, int nq, int64_t pos0, const int8_t* k, const int8_t* v,
                  const int64_t* slots, float q_mul, float v_mul, float* out) {
  constexpr int R_MAX = QPOS * G;
  constexpr int C = D / 2;  // int16 pairs (and bf16 pairs) per row
  const int R = nq * G;  // row r = position r / G, head r % G
  const int64_t nkeys = pos0 + nq, ntiles = (nkeys + KT - 1) / KT, npad = ntiles * KT;
  thread_local std::vector<float> S;  // scores, then exp
  thread_local std::vector<uint16_t> P;  // bf16 weights, [R][npad]
  S.resize(static_cast<size_t>(R) * npad);
  P.resize(static_cast<size_t>(R) * npad);
  alignas(64) int16_t q16[R_MAX][D];
  float rowmul[R_MAX];
  for (int r = 0; r < R; ++r) {
    const float* qr = q + (r / G) * qstride + (r % G) * D;
    float amax = 0.0f;
    for (int c = 0; c < D; ++c) amax = std::fmax(amax, std::fabs(qr[c]));
    const float d = amax / 32767.0f, inv = d > 0.0f ? 1.0f / d : 0.0f;
    for (int c = 0; c < D; ++c) q16[r][c] = static_cast<int16_t>(std::nearbyint(qr[c] * inv));
    rowmul[r] = d * q_mul;
  }
  // scores: per tile of 16 keys, the keys as int16 pairs transposed (vector c: pair c of each key),
  // then 8 rows at a time against them (8 independent sums: one vpdpwssd per pair and row)
  alignas(64) __m512i kt[C];
  for (int64_t t = 0; t < ntiles; ++t) {
    const int64_t k0 = t * KT;
    for (int cc = 0; cc < D / 32; ++cc) {
      __m512i rows[16];
      for (int i = 0; i < KT; ++i)
        rows[i] = k0 + i < nkeys
                      ? _mm512_cvtepi8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(k + slots[k0 + i] * D + 32 * cc)))
                      : _mm512_setzero_si512();
      transpose16(rows);
      for (int c = 0; c < 16; ++c) kt[16 * cc + c] = rows[c];
    }
    for (int r0 = 0; r0 < R; r0 += 8) {
      const int nr = std::min(8, R - r0);
      __m512i acc[8];
      for (int j = 0; j < 8; ++j) acc[j] = _mm512_setzero_si512();
      for (int c = 0; c < C; ++c) {
        for (int j = 0; j < 8; ++j) {
          if (j < nr) {
            int32_t pair;
            std::memcpy(&pair, &q16[r0 + j][2 * c], 4);
            acc[j] = _mm512_dpwssd_epi32(acc[j], kt[c], _mm512_set1_epi32(pair));
          }
        }
      }
      for (int j = 0; j < nr; ++j) {
        const int r = r0 + j;
        _mm512_storeu_ps(&S[r * npad + k0], _mm512_mul_ps(_mm512_cvtepi32_ps(acc[j]), _mm512_set1_ps(rowmul[r])));
      }
    }
  }
  // softmax per row over its visible keys; the weights rounded to bf16, their sum taken in the same
  // fixed order (16 lanes over the keys, then a fixed tree)
  float inv_sum[R_MAX];
  for (int r = 0; r < R; ++r) {
    float* s = &S[r * npad];
    const int64_t n = pos0 + r / G + 1, nfull = n / KT * KT;  // the row sees keys 0 .. its position
    __m512 mx = _mm512_set1_ps(-INFINITY);
    for (int64_t j = 0; j < nfull; j += KT) mx = _mm512_max_ps(mx, _mm512_loadu_ps(s + j));
    float m = _mm512_reduce_max_ps(mx);
    for (int64_t j = nfull; j < n; ++j) m = std::fmax(m, s[j]);
    const __m512 mv = _mm512_set1_ps(m);
    __m512 sum = _mm512_setzero_ps();
    uint16_t* p = &P[r * npad];
    for (int64_t j = 0; j < npad; j += KT) {
      __m512 e = exp512(_mm512_sub_ps(_mm512_loadu_ps(s + j), mv));
      if (j + KT > n) e = _mm512_maskz_mov_ps(static_cast<__mmask16>(n > j ? (1u << (n - j)) - 1 : 0), e);
      const __m256i b = (__m256i)_mm512_cvtneps_pbh(e);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(p + j), b);
      // the sum of the weights as rounded: bf16 → float is a shift
      sum = _mm512_add_ps(sum, _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(b), 16)));
    }
    alignas(64) float lanes[16];
    _mm512_store_ps(lanes, sum);
    float b8[8];
    for (int l = 0; l < 8; ++l) b8[l] = lanes[l] + lanes[l + 8];
    for (int w = 4; w >= 1; w /= 2)
      for (int l = 0; l < w; ++l) b8[l] += b8[l + w];
    inv_sum[r] = v_mul / b8[0];
  }
  // out = P·V: per tile, each pair of keys' values interleaved as bf16 pairs (vector: 16 dims),
  // then 4 rows at a time accumulate over the tile in float32 (one vdpbf16ps per key pair, 16 dims)
  constexpr int DC = D / 16;
  thread_local std::vector<float> acc;  // [R][D] float32 accumulators
  acc.assign(static_cast<size_t>(R) * D, 0.0f);
  alignas(64) __m512i vt[KT / 2][DC];
  for (int64_t t = 0; t < ntiles; ++t) {
    const int64_t k0 = t * KT;
    for (int jp = 0; jp < KT / 2; ++jp) {
      const int64_t a = k0 + 2 * jp, b = a + 1;
      for (int dc = 0; dc < DC; ++dc) {
        const __m128i va = a < nkeys ? _mm_loadu_si128(reinterpret_cast<const __m128i*>(v + slots[a] * D + 16 * dc)) : _mm_setzero_si128();
        const __m128i vb = b < nkeys ? _mm_loadu_si128(reinterpret_cast<const __m128i*>(v + slots[b] * D + 16 * dc)) : _mm_setzero_si128();
        // dims 0..15 as (a, b) pairs: int8 → int16 → float → bf16 (exact for |v| <= 127)
        const __m512i w = _mm512_cvtepi8_epi32(_mm_unpacklo_epi8(va, vb));  // pairs of dims 0..7
        const __m512i x = _mm512_cvtepi8_epi32(_mm_unpackhi_epi8(va, vb));  // dims 8..15
        vt[jp][dc] = (__m512i)_mm512_cvtne2ps_pbh(_mm512_cvtepi32_ps(x), _mm512_cvtepi32_ps(w));
      }
    }
    for (int r0 = 0; r0 < R; r0 += 4) {
      const int nr = std::min(4, R - r0);
      __m512 o[4][DC];
      for (int j = 0; j < nr; ++j)
        for (int dc = 0; dc < DC; ++dc) o[j][dc] = _mm512_loadu_ps(&acc[(r0 + j) * D + 16 * dc]);
      for (int jp = 0; jp < KT / 2; ++jp) {
        for (int j = 0; j < 4; ++j) {
          if (j < nr) {
            int32_t pair;
            std::memcpy(&pair, &P[(r0 + j) * npad + k0 + 2 * jp], 4);
            const __m512bh pb = (__m512bh)_mm512_set1_epi32(pair);
            for (int dc = 0; dc < DC; ++dc) o[j][dc] = _mm512_dpbf16_ps(o[j][dc], (__m512bh)vt[jp][dc], pb);
          }
        }
      }
      for (int j = 0; j < nr; ++j)
        for (int dc = 0; dc < DC; ++dc) _mm512_storeu_ps(&acc[(r0 + j) * D + 16 * dc], o[j][dc]);
    }
  }
  for (int r = 0; r < R; ++r) {
    float* dst = out + (r / G) * qstride + (r % G) * D;
    for (int c = 0; c < D; ++c) dst[c] = acc[r * D + c] * inv_sum[r];
  }
}

#endif

}  // namespace

// q: [T, H, D] float32 (after RoPE, unscaled), queries at positions pos .. pos+T-1 whose K/V the
// cache holds; k, v: [KV, S, D] int8, one layer; slots: int64, the slots of positions 0 .. pos+T-1;
// k_scale, v_scale: [KV] float32. Query t sees positions 0 .. pos+t. Returns [T, H, D] float32:
// softmax(q·kᵀ/√D)·v in real units.
inline torch::Tensor int8_prefill_attention(torch::Tensor q, torch::Tensor k, torch::Tensor v, torch::Tensor slots,
                                     int64_t pos, torch::Tensor k_scale, torch::Tensor v_scale) {
#ifdef PREFILL_SIMD
  const AttentionArgs a = check_attention_args(q, k, v, slots, pos, k_scale, v_scale);
  const int64_t t = a.t, h = a.h, d = a.d, kv = a.kv, cap = a.cap;
  const torch::Tensor &ks = a.ks, &vs = a.vs;
  const int64_t* sl = slots.data_ptr<int64_t>();
  auto out = torch::empty_like(q);
  // groups of at most QPOS positions, as even as they can be (20 queries: 10 + 10, not 16 + 4: equal
  // work items for the threads, and no small group paying a whole group's key conversions)
  const int64_t g = h / kv, groups = (t + QPOS - 1) / QPOS, per = (t + groups - 1) / groups;
  const float inv = 1.0f / std::sqrt(static_cast<float>(d));
  const auto fn = by_shape(d, g, [](auto D, auto G) { return &attend_group<decltype(D)::value, decltype(G)::value>; });
  const float* qp = q.data_ptr<float>();
  float* op = out.data_ptr<float>();
  const int8_t* kp = k.data_ptr<int8_t>();
  const int8_t* vp = v.data_ptr<int8_t>();
  const float* ksp = ks.data_ptr<float>();
  const float* vsp = vs.data_ptr<float>();
  // work items: (group of query positions, KV head), the later groups (more keys) first
  at::parallel_for(0, groups * kv, 1, [&](int64_t begin, int64_t end) {
    for (int64_t w = begin; w < end; ++w) {
      const int64_t gi = groups - 1 - w / kv, j = w % kv;
      const int64_t t0 = gi * per;
      const int nq = static_cast<int>(std::min<int64_t>(per, t - t0));
      if (nq <= 0) continue;
      const int64_t at_ = (t0 * h + j * g) * d;
      fn(qp + at_, h * d, nq, pos + t0, kp + j * cap * d, vp + j * cap * d, sl, ksp[j] * inv, vsp[j], op + at_);
    }
  });
  return out;
#else
  TORCH_CHECK(false, "built without AVX-512 VNNI and BF16: prompt attention runs torch's ops");
  return q;
#endif
}

