// The reference kernels: plain loops, portable, what any CPU compiles (and what the tests and
// tests/native/kernels_test.cpp compare the x86 and ARM kernels with). Each does, one output at a
// time, the float steps the SIMD kernels do in their lanes (fma for fma, in the same order), so
// the q8 tiles and the attention scores are bit for bit theirs. Correct, and slower than torch's
// kernels for the linear layers: q8_dot.py does not use a plain-loop build (the module's simd()).
#pragma once

#include "common.h"

namespace orin {

struct RefQ8 {
  static constexpr const char* name = "generic";

  // A tile of a Q4_1 layer (x86.h tile_q4_1 says the layout): QROWS weight rows times MR rows of x, in
  // split 16-bit codes (xq: row m's hi plane at m·2k, its lo plane k after).
  template <int MR, typename S>
  static void tile_q4_1(const uint8_t* w, const S* sc, const S* mn, int64_t nb, const int8_t* xq, int64_t k,
                        const float* xd, const float* xs, float* out, int64_t ostride) {
    for (int m = 0; m < MR; ++m)
      for (int r = 0; r < QROWS; ++r) {
        const int8_t* xh = xq + m * 2 * k;  // row m's split codes: hi plane, then lo (quantize_row_split)
        const int8_t* xl = xh + k;
        float f = 0.0f, g = 0.0f;
        for (int64_t p = 0; p < nb; p += 2) {
          const uint8_t* wp = w + (p / 2) * 8 * 32 + 4 * r;
          int32_t ia = 0, ib = 0;  // (integer sums: exact in any order)
          for (int gi = 0; gi < 8; ++gi)
            for (int i = 0; i < 4; ++i) {
              const int c = wp[gi * 32 + i];
              const int64_t ja = p * BLOCK + 4 * gi + i, jb = ja + BLOCK;
              ia += (c & 0x0F) * (256 * xh[ja] + xl[ja]);
              ib += (c >> 4) * (256 * xh[jb] + xl[jb]);
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
  }

  // A tile of an int8 matrix times int16 activations (x86.h tile_q8 says the layout).
  template <int MR>
  static void tile_q8(const int8_t* w, int64_t nb, const int16_t* xq, int64_t k, const float* xd, float* out,
                      int64_t ostride) {
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
  }
};

struct RefAttn {
  static constexpr const char* name = "generic";

  // scores[h·n + i] = qs_h · k_{slots[i]} for every head h < G and key i < n: per key and head, LANES
  // partial sums over D (lane l: elements l, l+16, ...), then lane_sum's tree.
  template <int D, int G>
  static void scores(const float* qs, const int8_t* k, const int64_t* slots, int64_t n, float* scores) {
    for (int64_t i = 0; i < n; ++i) {
      const int8_t* kr = k + slots[i] * D;
      float kf[D];
      for (int c = 0; c < D; ++c) kf[c] = static_cast<float>(kr[c]);
      for (int h = 0; h < G; ++h) {
        const float* qh = qs + h * D;
        float part[LANES] = {0};
        for (int c0 = 0; c0 < D; c0 += LANES)
          for (int l = 0; l < LANES; ++l) part[l] = std::fma(qh[c0 + l], kf[c0 + l], part[l]);
        scores[h * n + i] = lane_sum(part);
      }
    }
  }
};

}  // namespace orin
