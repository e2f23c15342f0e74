// The ARM kernels (AArch64 NEON; the Orin's Cortex-A78AE): the q8 tiles with the dot-product
// instructions (sdot, vdotq_s32, ARMv8.2's dotprod: -mcpu=native has it on the Orin) and the
// decode attention's scores with float multiply-adds. Written for the lanes, with the float steps
// the reference kernels (ref.h) take one output at a time (fma for fma, the same order, the same
// reduction tree): each result is bit for bit the reference's, so an ARM build's outputs are the x86
// build's (tests/native/kernels_test.cpp checks it under qemu-aarch64).
//
// Why the scores are not sdot: decode attention takes q in float32, and sdot multiplies bytes; q in
// int8 (llama.cpp's way) or split into two int8 halves would change every score against the x86
// and reference builds. The int8 x int8 products are the Q4_1 layers' (codes times the byte planes of their activations):
// those take sdot; an int8 matrix's int16 activations take widening multiply-adds (smlal), exact too.
#pragma once

#include "common.h"

#if defined(__aarch64__) && defined(__ARM_NEON)
#include <arm_neon.h>
#define ORIN_NEON_ATTN 1
#if defined(__ARM_FEATURE_DOTPROD)
#define ORIN_NEON_Q8 1
#endif
#endif

namespace orin {

#ifdef ORIN_NEON_Q8
struct NeonQ8 {
  static constexpr const char* name = "neon-dotprod";

  static inline float32x4_t load4(const float* p) { return vld1q_f32(p); }
  static inline float32x4_t load4(const half16* p) {
    return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(reinterpret_cast<const uint16_t*>(p))));
  }
  static inline int8x16_t splat4(const int8_t* p) {  // 4 bytes, in every 32-bit lane
    int32_t v;
    std::memcpy(&v, p, 4);
    return vreinterpretq_s8_s32(vdupq_n_s32(v));
  }

  // A tile of a Q4_1 layer (x86.h's tile_q4_1 has the layout): per group of 32 bytes, rows 0-3 in
  // its first 16 and rows 4-7 in its last, 4 codes a row; one sdot takes 4 codes of 4 rows against
  // 4 bytes of x (the codes are 0..15: as signed bytes they are the same), two sdots a group for x's
  // two byte planes (split 16-bit codes: common.h quantize_row_split). A block's 8 groups sum
  // its 32 products per row exactly; then per block the reference's fmas, 4 rows a vector.
  template <int MR, typename S>
  static void tile_q4_1(const uint8_t* w, const S* sc, const S* mn, int64_t nb, const int8_t* xq, int64_t k,
                        const float* xd, const float* xs, float* out, int64_t ostride) {
    const uint8x16_t low = vdupq_n_u8(0x0F);
    float32x4_t f[MR][2], g[MR][2];
    for (int m = 0; m < MR; ++m)
      for (int h = 0; h < 2; ++h) f[m][h] = g[m][h] = vdupq_n_f32(0.0f);
    for (int64_t p = 0; p < nb; p += 2, w += 8 * 32) {
      // the codes times x's hi bytes (ah, bh) and lo bytes (al, bl), per pair's first (a) and second
      // (b) block and per half of the rows; x's split codes: row m's hi plane at m·2k, lo k after
      int32x4_t ah[MR][2], al[MR][2], bh[MR][2], bl[MR][2];
      for (int m = 0; m < MR; ++m)
        for (int h = 0; h < 2; ++h) ah[m][h] = al[m][h] = bh[m][h] = bl[m][h] = vdupq_n_s32(0);
      const int8_t* xa = xq + p * BLOCK;
#pragma GCC unroll 8
      for (int gi = 0; gi < 8; ++gi) {
        const uint8x16_t v0 = vld1q_u8(w + gi * 32), v1 = vld1q_u8(w + gi * 32 + 16);
        const int8x16_t lo0 = vreinterpretq_s8_u8(vandq_u8(v0, low)), hi0 = vreinterpretq_s8_u8(vshrq_n_u8(v0, 4));
        const int8x16_t lo1 = vreinterpretq_s8_u8(vandq_u8(v1, low)), hi1 = vreinterpretq_s8_u8(vshrq_n_u8(v1, 4));
        for (int m = 0; m < MR; ++m) {
          const int8_t* xm = xa + m * 2 * k + 4 * gi;
          const int8x16_t a4h = splat4(xm), a4l = splat4(xm + k);
          const int8x16_t b4h = splat4(xm + BLOCK), b4l = splat4(xm + k + BLOCK);
          ah[m][0] = vdotq_s32(ah[m][0], lo0, a4h);
          ah[m][1] = vdotq_s32(ah[m][1], lo1, a4h);
          al[m][0] = vdotq_s32(al[m][0], lo0, a4l);
          al[m][1] = vdotq_s32(al[m][1], lo1, a4l);
          bh[m][0] = vdotq_s32(bh[m][0], hi0, b4h);
          bh[m][1] = vdotq_s32(bh[m][1], hi1, b4h);
          bl[m][0] = vdotq_s32(bl[m][0], hi0, b4l);
          bl[m][1] = vdotq_s32(bl[m][1], hi1, b4l);
        }
      }
      int32x4_t ia[MR][2], ib[MR][2];  // 256·Σc·hi + Σc·lo = Σc·q, exact (x86.h says why)
      for (int m = 0; m < MR; ++m)
        for (int h = 0; h < 2; ++h) {
          ia[m][h] = vaddq_s32(vshlq_n_s32(ah[m][h], 8), al[m][h]);
          ib[m][h] = vaddq_s32(vshlq_n_s32(bh[m][h], 8), bl[m][h]);
        }
      for (int h = 0; h < 2; ++h) {
        const float32x4_t sa = load4(sc + p * QROWS + 4 * h), sb = load4(sc + (p + 1) * QROWS + 4 * h);
        const float32x4_t ma = load4(mn + p * QROWS + 4 * h), mb = load4(mn + (p + 1) * QROWS + 4 * h);
        for (int m = 0; m < MR; ++m) {
          const float* d = xd + m * nb + p;
          const float* s = xs + m * nb + p;
          f[m][h] = vfmaq_f32(f[m][h], vcvtq_f32_s32(ia[m][h]), vmulq_f32(sa, vdupq_n_f32(d[0])));
          f[m][h] = vfmaq_f32(f[m][h], vcvtq_f32_s32(ib[m][h]), vmulq_f32(sb, vdupq_n_f32(d[1])));
          g[m][h] = vfmaq_f32(g[m][h], ma, vdupq_n_f32(s[0]));
          g[m][h] = vfmaq_f32(g[m][h], mb, vdupq_n_f32(s[1]));
        }
      }
    }
    for (int m = 0; m < MR; ++m)
      for (int h = 0; h < 2; ++h) vst1q_f32(out + m * ostride + 4 * h, vaddq_f32(f[m][h], g[m][h]));
  }

  // A tile of an int8 matrix times int16 activations (x86.h's tile_q8 has the layout): a group's 16
  // bytes are 8 rows x 2 inputs; widened to int16, each half (4 rows) times the broadcast pair of x
  // accumulates its products in int32 (smlal), and per block a pairwise add gives each row's sum
  // (exact: |w·x| < 2^22). Then the reference's one fma per block, 4 rows a vector.
  template <int MR>
  static void tile_q8(const int8_t* w, int64_t nb, const int16_t* xq, int64_t k, const float* xd, float* out,
                      int64_t ostride) {
    float32x4_t f[MR][2];
    for (int m = 0; m < MR; ++m) f[m][0] = f[m][1] = vdupq_n_f32(0.0f);
    for (int64_t b = 0; b < nb; ++b, w += ROWS * BLOCK) {
      int32x4_t acc[MR][4];  // rows 0-1, 2-3, 4-5, 6-7: (row, input) products
      for (int m = 0; m < MR; ++m)
        for (int a = 0; a < 4; ++a) acc[m][a] = vdupq_n_s32(0);
      const int16_t* xb = xq + b * BLOCK;
#pragma GCC unroll 16
      for (int c = 0; c < BLOCK / 2; ++c) {
        const int8x16_t wv = vld1q_s8(w + 16 * c);
        const int16x8_t wl = vmovl_s8(vget_low_s8(wv)), wh = vmovl_high_s8(wv);
        for (int m = 0; m < MR; ++m) {
          int32_t pair;  // x's inputs 2c and 2c+1
          std::memcpy(&pair, xb + m * k + 2 * c, 4);
          const int16x8_t xp = vreinterpretq_s16_s32(vdupq_n_s32(pair));
          acc[m][0] = vmlal_s16(acc[m][0], vget_low_s16(wl), vget_low_s16(xp));
          acc[m][1] = vmlal_high_s16(acc[m][1], wl, xp);
          acc[m][2] = vmlal_s16(acc[m][2], vget_low_s16(wh), vget_low_s16(xp));
          acc[m][3] = vmlal_high_s16(acc[m][3], wh, xp);
        }
      }
      for (int m = 0; m < MR; ++m) {
        const float32x4_t d = vdupq_n_f32(xd[m * nb + b]);
        f[m][0] = vfmaq_f32(f[m][0], vcvtq_f32_s32(vpaddq_s32(acc[m][0], acc[m][1])), d);
        f[m][1] = vfmaq_f32(f[m][1], vcvtq_f32_s32(vpaddq_s32(acc[m][2], acc[m][3])), d);
      }
    }
    for (int m = 0; m < MR; ++m) {
      vst1q_f32(out + m * ostride, f[m][0]);
      vst1q_f32(out + m * ostride + 4, f[m][1]);
    }
  }
};
#endif  // ORIN_NEON_Q8

#ifdef ORIN_NEON_ATTN
struct NeonAttn {
  static constexpr const char* name = "neon";

  // The reference's scores (ref.h RefAttn): per key and head, 16 lanes of fmas over D in four
  // vectors, then lane_sum's tree (lanes l and l+8, l and l+4, ...) as vector adds.
  template <int D, int G>
  static void scores(const float* qs, const int8_t* k, const int64_t* slots, int64_t n, float* scores) {
    constexpr int C = D / 4;
    for (int64_t i = 0; i < n; ++i) {
      const int8_t* kr = k + slots[i] * D;
      float32x4_t kf[C];
      for (int c = 0; c < D / 16; ++c) {
        const int8x16_t b = vld1q_s8(kr + 16 * c);
        const int16x8_t lo = vmovl_s8(vget_low_s8(b)), hi = vmovl_high_s8(b);
        kf[4 * c + 0] = vcvtq_f32_s32(vmovl_s16(vget_low_s16(lo)));
        kf[4 * c + 1] = vcvtq_f32_s32(vmovl_high_s16(lo));
        kf[4 * c + 2] = vcvtq_f32_s32(vmovl_s16(vget_low_s16(hi)));
        kf[4 * c + 3] = vcvtq_f32_s32(vmovl_high_s16(hi));
      }
      for (int h = 0; h < G; ++h) {
        const float* qh = qs + h * D;
        float32x4_t p[4] = {vdupq_n_f32(0.0f), vdupq_n_f32(0.0f), vdupq_n_f32(0.0f), vdupq_n_f32(0.0f)};
        for (int c = 0; c < C; ++c) p[c % 4] = vfmaq_f32(p[c % 4], vld1q_f32(qh + 4 * c), kf[c]);
        const float32x4_t t = vaddq_f32(vaddq_f32(p[0], p[2]), vaddq_f32(p[1], p[3]));
        const float32x2_t u = vadd_f32(vget_low_f32(t), vget_high_f32(t));
        scores[h * n + i] = vget_lane_f32(u, 0) + vget_lane_f32(u, 1);
      }
    }
  }
};
#endif  // ORIN_NEON_ATTN

}  // namespace orin
