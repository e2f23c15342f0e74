// The kernel cores without torch (orin_llm/kernels/csrc/kernels): this build's kernels (x86 here,
// NEON when cross-compiled for AArch64 and run under qemu-aarch64) against the reference loops, on
// random inputs. The q8 tiles and the decode attention are bit for bit the reference's (the same
// float steps in the same order); the x86 prompt attention op, which has no reference loops, is
// checked against the reference decode attention of the same queries within its bf16 bound.
// Built and run by tests/native/test_kernels.py. Prints one line per check, then a count.
#include "../../orin_llm/kernels/csrc/kernels/dispatch.h"

#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

using namespace orin;

static int passed = 0, failed = 0;
static std::mt19937 rng(1234);

static void report(bool ok, const std::string& what, const std::string& detail = "") {
  (ok ? passed : failed) += 1;
  std::printf("%s %s%s%s\n", ok ? "ok" : "FAIL", what.c_str(), detail.empty() ? "" : ": ", detail.c_str());
}

static float uniform(float a, float b) { return std::uniform_real_distribution<float>(a, b)(rng); }
static int randint(int a, int b) { return std::uniform_int_distribution<int>(a, b)(rng); }

static std::vector<float> activations(int64_t m, int64_t k) {
  std::vector<float> x(m * k);
  for (int64_t i = 0; i < m * k; ++i) x[i] = uniform(-1, 1) * (0.1f + 4.0f * (i % k) / k);
  for (int64_t i = 0; i < m; ++i) x[i * k + 7] = 40.0f;  // an outlier feature, as hidden states have
  for (int64_t j = 0; j < BLOCK; ++j) x[j] = 0.0f;       // a block of zeros (scale 0)
  return x;
}

static half16 random_scale(half16) {  // a normal half in [2^-10, 2^2), either sign for mins
  return half16{static_cast<uint16_t>((randint(0, 1) << 15) | (randint(5, 16) << 10) | randint(0, 1023))};
}
static float random_scale(float) { return uniform(-0.05f, 0.05f); }

static bool same_bits(const std::vector<float>& a, const std::vector<float>& b, std::string& detail) {
  for (size_t i = 0; i < a.size(); ++i)
    if (std::memcmp(&a[i], &b[i], 4) != 0) {
      detail = "element " + std::to_string(i) + ": " + std::to_string(a[i]) + " vs " + std::to_string(b[i]);
      return false;
    }
  return true;
}

// The Q4_1 layers' split codes: 256·hi + lo is the 16-bit code quantize_row takes at SPLIT_QMAX (the
// same d and d·Σq), hi within ±127 (what keeps it a byte on every path).
static void check_split(int64_t m, int64_t k) {
  const int64_t nb = k / BLOCK;
  const std::vector<float> x = activations(m, k);
  std::vector<int8_t> hl(m * 2 * k);
  std::vector<int16_t> q(m * k);
  std::vector<float> d(m * nb), s(m * nb), d16(m * nb), s16(m * nb);
  quantize_rows_split(x.data(), m, k, hl.data(), d.data(), s.data());
  quantize_rows<int16_t, SPLIT_QMAX>(x.data(), m, k, q.data(), d16.data(), s16.data());
  bool ok = std::memcmp(d.data(), d16.data(), 4 * d.size()) == 0 && std::memcmp(s.data(), s16.data(), 4 * s.size()) == 0;
  std::string detail;
  for (int64_t i = 0; i < m && ok; ++i)
    for (int64_t j = 0; j < k && ok; ++j) {
      const int hi = hl[i * 2 * k + j], lo = hl[i * 2 * k + k + j];
      if (256 * hi + lo != q[i * k + j] || hi < -127 || hi > 127) {
        ok = false;
        detail = "row " + std::to_string(i) + " code " + std::to_string(j) + ": " + std::to_string(hi) + "·256 + " +
                 std::to_string(lo) + " vs " + std::to_string(q[i * k + j]);
      }
    }
  report(ok, "split codes m=" + std::to_string(m) + " k=" + std::to_string(k), detail);
}

template <typename S>
static void check_q4_1(int64_t n, int64_t k, int64_t m, const char* stype) {
  const int64_t nb = k / BLOCK;
  std::vector<uint8_t> codes(n * k / 2);
  for (auto& c : codes) c = static_cast<uint8_t>(randint(0, 255));
  std::vector<S> sc(n * nb), mn(n * nb);
  for (auto& s : sc) s = random_scale(S{});
  for (auto& s : mn) s = random_scale(S{});
  const std::vector<float> x = activations(m, k);
  std::vector<int8_t> q(m * 2 * k);
  std::vector<float> d(m * nb), s(m * nb), ref(m * n), got(m * n);
  quantize_rows_split(x.data(), m, k, q.data(), d.data(), s.data());
  q4_1_tiles<RefQ8, S>(codes.data(), sc.data(), mn.data(), n, k, q.data(), d.data(), s.data(), m, 0, n / QROWS, ref.data());
  q4_1_tiles<Q8Kernels, S>(codes.data(), sc.data(), mn.data(), n, k, q.data(), d.data(), s.data(), m, 0, n / QROWS,
                           got.data());
  std::string detail;
  report(same_bits(ref, got, detail),
         "q4_1 " + std::string(stype) + " n=" + std::to_string(n) + " k=" + std::to_string(k) + " m=" + std::to_string(m),
         detail);
}

static void check_q8(int64_t n, int64_t k, int64_t m) {
  const int64_t nb = k / BLOCK;
  std::vector<int8_t> codes(n * k);
  for (auto& c : codes) c = static_cast<int8_t>(randint(-127, 127));
  std::vector<float> rs(n);
  for (auto& r : rs) r = uniform(0.001f, 0.02f);
  const std::vector<float> x = activations(m, k);
  std::vector<int16_t> q(m * k);
  std::vector<float> d(m * nb), s(m * nb), ref(m * n), got(m * n);
  quantize_rows<int16_t, 32767>(x.data(), m, k, q.data(), d.data(), s.data());
  q8_tiles<RefQ8>(codes.data(), rs.data(), n, k, q.data(), d.data(), m, 0, n / ROWS, ref.data());
  q8_tiles<Q8Kernels>(codes.data(), rs.data(), n, k, q.data(), d.data(), m, 0, n / ROWS, got.data());
  std::string detail;
  report(same_bits(ref, got, detail),
         "q8 n=" + std::to_string(n) + " k=" + std::to_string(k) + " m=" + std::to_string(m), detail);
}

struct AttentionCase {
  std::vector<float> q, ks, vs;
  std::vector<int8_t> k, v;
  std::vector<int64_t> slots;
  AttentionView view(std::vector<float>& out, int64_t t, int64_t h, int64_t d, int64_t kv, int64_t cap, int64_t pos) {
    out.assign(t * h * d, 0.0f);
    return {q.data(), k.data(), v.data(), slots.data(), ks.data(), vs.data(), t, h, d, kv, cap, pos, out.data()};
  }
};

static AttentionCase attention_case(int64_t t, int64_t h, int64_t d, int64_t kv, int64_t cap, int64_t pos) {
  AttentionCase c;
  c.q.resize(t * h * d);
  for (auto& x : c.q) x = uniform(-2, 2);
  c.k.resize(kv * cap * d);
  c.v.resize(kv * cap * d);
  for (auto& x : c.k) x = static_cast<int8_t>(randint(-127, 127));
  for (auto& x : c.v) x = static_cast<int8_t>(randint(-127, 127));
  c.slots.resize(cap);
  for (int64_t i = 0; i < cap; ++i) c.slots[i] = i;
  std::shuffle(c.slots.begin(), c.slots.end(), rng);  // a paged sequence's scattered slots
  for (int64_t i = 0; i < kv; ++i) {
    c.ks.push_back(uniform(0.01f, 0.05f));
    c.vs.push_back(uniform(0.01f, 0.05f));
  }
  return c;
}

static void check_attention(int64_t t, int64_t h, int64_t d, int64_t kv, int64_t pos) {
  const int64_t cap = pos + t + 37;
  AttentionCase c = attention_case(t, h, d, kv, cap, pos);
  std::vector<float> ref, got;
  const AttentionView a = c.view(ref, t, h, d, kv, cap, pos), b = c.view(got, t, h, d, kv, cap, pos);
  decode_attention_items<RefAttn>(a, 0, decode_attention_work(a));
  decode_attention_items<AttnKernels>(b, 0, decode_attention_work(b));
  std::string detail;
  const std::string what = "decode attention t=" + std::to_string(t) + " h=" + std::to_string(h) + " d=" +
                           std::to_string(d) + " kv=" + std::to_string(kv) + " pos=" + std::to_string(pos);
  report(same_bits(ref, got, detail), what, detail);
#ifdef ORIN_X86_PREFILL
  if (HAS_PREFILL) {  // the prompt op: bf16 weights (2^-9 relative), within 3e-3 of the largest output
    std::vector<float> pre;
    const AttentionView p = c.view(pre, t, h, d, kv, cap, pos);
    prefill_attention_items(p, 0, prefill_attention_work(p));
    float worst = 0.0f, top = 0.0f;
    for (size_t i = 0; i < ref.size(); ++i) {
      worst = std::max(worst, std::fabs(pre[i] - ref[i]));
      top = std::max(top, std::fabs(ref[i]));
    }
    report(worst <= 3e-3f * top, "prompt attention (x86) vs reference " + what.substr(17),
           "max error " + std::to_string(worst / top) + " of the largest output");
  }
#endif
}

int main() {
  std::printf("kernels: q8 %s, attention %s, prompt op %s\n", Q8Kernels::name, AttnKernels::name,
              HAS_PREFILL ? "yes" : "no");
  if (to_float(half16{0x3C00}) != 1.0f || to_float(half16{0xC000}) != -2.0f || to_float(half16{0x0001}) != 0x1p-24f)
    report(false, "half16 conversion");
  for (int64_t m : {1, 2, 3, 4, 5, 9}) {
    check_split(m, 576);
    check_q4_1<float>(64, 128, m, "float32");
    check_q4_1<half16>(96, 576, m, "float16");
    check_q8(64, 96, m);
    check_q8(32, 576, m);
  }
  for (int64_t pos : {0, 15, 40, 517}) {
    check_attention(1, 9, 64, 3, pos);
    check_attention(5, 8, 128, 2, pos);
    check_attention(17, 32, 64, 8, pos);
  }
  std::printf("%d passed, %d failed\n", passed, failed);
  return failed == 0 ? 0 : 1;
}
