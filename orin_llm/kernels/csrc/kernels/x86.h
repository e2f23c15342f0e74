// The x86 kernels: AVX2 (with AVX-512 VNNI's or AVX-VNNI's dot products where the CPU has them) for
// the q8 tiles, AVX-512 for the decode attention's scores, AVX-512 VNNI and BF16 for the prompt
// attention op. Each is written for the lanes, with the float steps the reference kernels (ref.h)
// take one output at a time: the q8 tiles and the scores are bit for bit the reference's.
#pragma once

#include "common.h"

#include <algorithm>
#include <cmath>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#define ORIN_X86_Q8 1
#endif
#if defined(__AVX512F__)
#define ORIN_X86_ATTN 1
#endif
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VNNI__) && defined(__AVX512BF16__)
#define ORIN_X86_PREFILL 1
#endif

namespace orin {

#ifdef ORIN_X86_Q8
struct X86Q8 {
#if (defined(__AVX512VNNI__) && defined(__AVX512VL__)) || defined(__AVXVNNI__)
  static constexpr const char* name = "avx2-vnni";
#else
  static constexpr const char* name = "avx2";
#endif

  // acc + 8 int32 sums of 4 products each: unsigned bytes u (Q4_1 codes) times signed bytes s
  static inline __m256i dot_u8s8(__m256i acc, __m256i u, __m256i s) {
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
    return _mm256_dpbusd_epi32(acc, u, s);
#elif defined(__AVXVNNI__)
    return _mm256_dpbusd_avx_epi32(acc, u, s);
#else  // (maddubs cannot saturate here: u is a 4-bit code, 2·15·128 < 32767)
    return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1)));
#endif
  }

  // acc + 8 int32 sums of 2 products each: int16 pairs w and x
  static inline __m256i dot_s16(__m256i acc, __m256i w, __m256i x) {
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
    return _mm256_dpwssd_epi32(acc, w, x);
#elif defined(__AVXVNNI__)
    return _mm256_dpwssd_avx_epi32(acc, w, x);
#else  // the same exact pair sums (|w·x| < 2^22: no wrap)
    return _mm256_add_epi32(acc, _mm256_madd_epi16(w, x));
#endif
  }

  // A Q4_1 layer's scales and mins are float32, or float16 where every one of them is exact in it
  // (q8_dot.py pack_q4_1): both convert to the same float32 values.
  static inline __m256 load8(const float* p) { return _mm256_loadu_ps(p); }
  static inline __m256 load8(const half16* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }

  // A tile of a Q4_1 layer: QROWS weight rows times MR rows of x (split 16-bit codes: two dpbusd a
  // group, one per byte plane), the output rows in the lanes of one vector (as ggml's repacked Q4_0x8 GEMM has them). w: the tile's nb/2 pairs of blocks, each 8
  // groups of 32 bytes; group g's byte 4r+i = code 4g+i of row r's first block | that of its second
  // block << 4. One dpbusd then takes 4 codes of all 8 rows against 4 bytes of x broadcast, a block's
  // 8 of them sum its 32 products per row exactly (in int32), and one fma per block scales all 8 rows:
  // the float work is per block and 8 rows, not per block and row (what made an M-row call cost M
  // one-row calls). sc, mn: [nb][QROWS] scales and mins. out[m][r] = Σ_b sc_b·d_b·Σ(code·q) (chain f)
  // + Σ_b mn_b·s_b (chain g), d_b and s_b being x's block scale and d_b·Σq. Each output's operations
  // and their order depend only on its own rows of x and of weights, never on MR or on the other lanes.
  template <int MR, typename S>
  static void tile_q4_1(const uint8_t* w, const S* sc, const S* mn, int64_t nb, const int8_t* xq, int64_t k,
                 const float* xd, const float* xs, float* out, int64_t ostride) {
    const __m256i low = _mm256_set1_epi8(0x0F);
    __m256 f[MR], g[MR];
#pragma GCC unroll 4
    for (int m = 0; m < MR; ++m) f[m] = g[m] = _mm256_setzero_ps();
    for (int64_t p = 0; p < nb; p += 2, w += 8 * 32) {
      // per row of x: the codes times its hi bytes (ah, bh) and its lo bytes (al, bl), for the pair's
      // first block (a) and second (b); x's split codes (quantize_row_split): row m's hi plane at
      // m·2k, its lo plane k after
      __m256i ah[MR], al[MR], bh[MR], bl[MR];
#pragma GCC unroll 4
      for (int m = 0; m < MR; ++m) ah[m] = al[m] = bh[m] = bl[m] = _mm256_setzero_si256();
      const int8_t* xa = xq + p * BLOCK;
#pragma GCC unroll 8
      for (int gi = 0; gi < 8; ++gi) {
        const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + gi * 32));
        const __m256i lo = _mm256_and_si256(v, low), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), low);
#pragma GCC unroll 4
        for (int m = 0; m < MR; ++m) {
          const int8_t* xm = xa + m * 2 * k + 4 * gi;
          int32_t a4h, a4l, b4h, b4l;  // 4 bytes of x, as one int32 to broadcast
          std::memcpy(&a4h, xm, 4);
          std::memcpy(&a4l, xm + k, 4);
          std::memcpy(&b4h, xm + BLOCK, 4);
          std::memcpy(&b4l, xm + k + BLOCK, 4);
          ah[m] = dot_u8s8(ah[m], lo, _mm256_set1_epi32(a4h));
          al[m] = dot_u8s8(al[m], lo, _mm256_set1_epi32(a4l));
          bh[m] = dot_u8s8(bh[m], hi, _mm256_set1_epi32(b4h));
          bl[m] = dot_u8s8(bl[m], hi, _mm256_set1_epi32(b4l));
        }
      }
      // 256·Σc·hi + Σc·lo = Σc·q, exact: |Σc·q| <= 32·15·SPLIT_QMAX < 2^24, so its float is exact too
      __m256i ia[MR], ib[MR];
#pragma GCC unroll 4
      for (int m = 0; m < MR; ++m) {
        ia[m] = _mm256_add_epi32(_mm256_slli_epi32(ah[m], 8), al[m]);
        ib[m] = _mm256_add_epi32(_mm256_slli_epi32(bh[m], 8), bl[m]);
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
  static void tile_q8(const int8_t* w, int64_t nb, const int16_t* xq, int64_t k, const float* xd, float* out,
               int64_t ostride) {
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
  }
};
#endif  // ORIN_X86_Q8

#ifdef ORIN_X86_ATTN
struct X86Attn {
  static constexpr const char* name = "avx512";

  // 16 vectors of 16 partial sums (one per key) → one vector of their 16 sums, in key order. Each
  // key's 16 lanes are added in one fixed tree (lanes l and l+8, then l and l+4, ...), whatever the
  // other keys hold: a key's score does not depend on which keys share its block.
  static inline __m512 reduce16(__m512* v) {
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
  static void scores(const float* qs, const int8_t* k, const int64_t* slots, int64_t n, float* scores) {
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
};
#endif  // ORIN_X86_ATTN

#ifdef ORIN_X86_PREFILL
// The prompt attention op (ops.h prefill_attention_items): x86 only so far; elsewhere the op is not
// built in, and prompt attention runs attention.py's bf16 GEMMs.
namespace x86_prefill {

// exp(x) for x <= 0, 16 lanes: Cephes' expf polynomial (as common.h's scalar exp_nonpositive), within a
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

}  // namespace x86_prefill
#endif  // ORIN_X86_PREFILL

}  // namespace orin
