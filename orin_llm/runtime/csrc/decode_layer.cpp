// One decoder layer of a decode or verify step, or of a prompt chunk, in one call (CPU): see
// orin_llm/runtime/decode_layer.py.
//
// The same kernels as the per-op path (q8_dot.h's linear layers, int8_attention.h's and
// prefill_attention.h's attention), with
// the small ops between them (RMSNorm, RoPE, the INT8 K/V write, SiLU·up, the residual adds) done
// here on the rows in place, where torch needed about 150 op calls a layer for them, each a few
// microseconds of dispatch for a few hundred floats of work.
//
// Every row is computed on its own, in a fixed order that depends only on that row (and, for
// attention, on its sequence's cached keys): a row's result does not depend on which other rows or
// sequences share the call, which is what keeps greedy speculation exactly lossless and batched
// answers equal to the same request alone. The small ops round differently from torch's (another
// summation order in the norm, no separate rounding of RoPE's two products): the model's decode
// steps all take this path or all take torch's (llama.py), never a mix within one model.
#include "int8_attention.h"
#include "prefill_attention.h"
#include "q8_dot.h"

namespace {

// x · rsqrt(mean(x²) + eps) · w, one row: squares summed in LANES lanes, then a fixed tree.
void rms_norm(const float* x, const float* w, int64_t d, float eps, float* out) {
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
void rope(float* x, int64_t heads, int64_t d, const float* cos, const float* sin) {
  const int64_t half = d / 2;
  float tmp[128];
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

torch::Tensor linear(const torch::Tensor& x, const std::vector<torch::Tensor>& w) {
  TORCH_CHECK(w.size() == 3 || w.size() == 2, "a linear layer is (codes, scales, mins) or (codes, scales)");
  return w.size() == 3 ? q4_1_linear(x, w[0], w[1], w[2]) : q8_linear(x, w[0], w[1]);
}

void check_float(const torch::Tensor& t, const char* what) {
  TORCH_CHECK(t.scalar_type() == torch::kFloat && t.is_contiguous(), what, ": contiguous float32");
}

}  // namespace

// x: [T, hidden] float32, the residual stream of every row of the step, updated in place.
// norms: the layer's input and post-attention RMSNorm weights [hidden]; qkv, o, gate_up, down: each
// linear layer's q8_dot tiles (q8_dot.py). cos, sin: rope_tables' [P, 1, head_dim]. Per sequence,
// in row order: caches[5·i ..] = K, V ([KV, S, D] int8, this layer), their [KV] scales and the slots
// of positions 0 .. pos+t-1 (int64); pos[i], its first position; rows[i], its row count;
// prompt_from[i], its first row that attends with the prompt op (the rows before it, and all rows where
// it is rows[i] or more, attend with the decode op).
void decode_layer(torch::Tensor x, torch::Tensor norm1, torch::Tensor norm2, double eps,
                  std::vector<torch::Tensor> qkv, std::vector<torch::Tensor> o,
                  std::vector<torch::Tensor> gate_up, std::vector<torch::Tensor> down,
                  torch::Tensor cos, torch::Tensor sin, int64_t heads, int64_t kv_heads,
                  std::vector<torch::Tensor> caches, std::vector<int64_t> pos, std::vector<int64_t> rows,
                  std::vector<int64_t> prompt_from) {
  check_float(x, "x");
  TORCH_CHECK(x.dim() == 2, "x: [T, hidden]");
  const int64_t t = x.size(0), hidden = x.size(1);
  check_float(norm1, "norm1");
  check_float(norm2, "norm2");
  check_float(cos, "cos");
  check_float(sin, "sin");
  TORCH_CHECK(norm1.numel() == hidden && norm2.numel() == hidden, "norm weights: [hidden]");
  TORCH_CHECK(cos.dim() == 3 && cos.sizes() == sin.sizes(), "cos, sin: [P, 1, head_dim]");
  const int64_t d = cos.size(2), positions = cos.size(0);
  TORCH_CHECK(d == 64 || d == 128, "head_dim must be 64 or 128");
  TORCH_CHECK(pos.size() == rows.size() && caches.size() == 5 * pos.size() && prompt_from.size() == pos.size(),
              "5 cache tensors, a pos, a row count and a prompt_from per sequence");
  int64_t total = 0;
  for (size_t i = 0; i < pos.size(); ++i) {
    TORCH_CHECK(pos[i] >= 0 && rows[i] > 0 && pos[i] + rows[i] <= positions, "positions past the rope tables");
    total += rows[i];
  }
  TORCH_CHECK(total == t, "the sequences' rows must add up to x's");
  const float fe = static_cast<float>(eps);
  float* xp = x.data_ptr<float>();

  auto h = torch::empty({t, hidden}, torch::kFloat);
  for (int64_t r = 0; r < t; ++r)
    rms_norm(xp + r * hidden, norm1.data_ptr<float>(), hidden, fe, h.data_ptr<float>() + r * hidden);
  auto y = linear(h, qkv);  // [T, (H + 2·KV)·D]: q, k and v heads side by side
  const int64_t width = (heads + 2 * kv_heads) * d;
  TORCH_CHECK(y.size(1) == width, "qkv has ", y.size(1), " outputs, the heads need ", width);
  float* yp = y.data_ptr<float>();

  auto attn = torch::empty({t, heads * d}, torch::kFloat);
  int64_t row = 0;
  for (size_t i = 0; i < pos.size(); ++i) {
    const torch::Tensor &k = caches[5 * i], &v = caches[5 * i + 1], &slots = caches[5 * i + 4];
    TORCH_CHECK(k.scalar_type() == torch::kChar && k.is_contiguous() && k.dim() == 3 && k.size(0) == kv_heads &&
                k.size(2) == d && v.sizes() == k.sizes() && v.scalar_type() == torch::kChar && v.is_contiguous(),
                "K, V: [KV, S, D] int8");
    TORCH_CHECK(slots.scalar_type() == torch::kLong && slots.dim() == 1 && slots.size(0) >= pos[i] + rows[i],
                "slots: int64, covering positions 0 .. pos+t-1");
    const torch::Tensor ks = caches[5 * i + 2].to(torch::kFloat).contiguous();
    const torch::Tensor vs = caches[5 * i + 3].to(torch::kFloat).contiguous();
    TORCH_CHECK(ks.numel() == kv_heads && vs.numel() == kv_heads, "one K and one V scale per KV head");
    const int64_t cap = k.size(1);
    const int64_t* sl = slots.data_ptr<int64_t>();
    auto q = torch::empty({rows[i], heads, d}, torch::kFloat);
    for (int64_t j = 0; j < rows[i]; ++j) {
      const int64_t p = pos[i] + j, slot = sl[p];
      TORCH_CHECK(slot >= 0 && slot < cap, "slot out of range");
      float* yr = yp + (row + j) * width;
      rope(yr, heads + kv_heads, d, cos.data_ptr<float>() + p * d, sin.data_ptr<float>() + p * d);
      std::copy(yr, yr + heads * d, q.data_ptr<float>() + j * heads * d);
      for (int64_t g = 0; g < kv_heads; ++g) {  // this position's K and V, into the cache
        const float *kr = yr + (heads + g) * d, *vr = yr + (heads + kv_heads + g) * d;
        int8_t* kc = k.data_ptr<int8_t>() + (g * cap + slot) * d;
        int8_t* vc = v.data_ptr<int8_t>() + (g * cap + slot) * d;
        const float ksg = ks.data_ptr<float>()[g], vsg = vs.data_ptr<float>()[g];
        for (int64_t c = 0; c < d; ++c) {
          kc[c] = quantize_kv(kr[c], ksg);
          vc[c] = quantize_kv(vr[c], vsg);
        }
      }
    }
    const int64_t s = std::max<int64_t>(0, std::min(prompt_from[i], rows[i]));
    torch::Tensor out;  // [t, H, D]
    if (s == rows[i]) {
      out = int8_decode_attention(q, k, v, slots, pos[i], ks, vs);
    } else if (s == 0) {
      out = int8_prefill_attention(q, k, v, slots, pos[i], ks, vs);
    } else {  // a prompt chunk whose first blocks end before MIN_KEYS keys (llama.py _fused_layers)
      out = torch::cat({int8_decode_attention(q.narrow(0, 0, s).contiguous(), k, v, slots, pos[i], ks, vs),
                        int8_prefill_attention(q.narrow(0, s, rows[i] - s).contiguous(), k, v, slots, pos[i] + s, ks, vs)});
    }
    std::copy(out.data_ptr<float>(), out.data_ptr<float>() + rows[i] * heads * d,
              attn.data_ptr<float>() + row * heads * d);
    row += rows[i];
  }

  auto a = linear(attn, o);
  TORCH_CHECK(a.size(1) == hidden, "o_proj must give hidden outputs");
  const float* ap = a.data_ptr<float>();
  for (int64_t e = 0; e < t * hidden; ++e) xp[e] += ap[e];

  for (int64_t r = 0; r < t; ++r)
    rms_norm(xp + r * hidden, norm2.data_ptr<float>(), hidden, fe, h.data_ptr<float>() + r * hidden);
  auto gu = linear(h, gate_up);  // [T, 2·I]: gate, then up
  const int64_t inter = gu.size(1) / 2;
  auto act = torch::empty({t, inter}, torch::kFloat);
  const float* gp = gu.data_ptr<float>();
  float* actp = act.data_ptr<float>();
  for (int64_t r = 0; r < t; ++r)
    for (int64_t c = 0; c < inter; ++c) {
      const float g = gp[r * 2 * inter + c];
      actp[r * inter + c] = g / (1.0f + std::exp(-g)) * gp[r * 2 * inter + inter + c];
    }
  auto m = linear(act, down);
  TORCH_CHECK(m.size(1) == hidden, "down_proj must give hidden outputs");
  const float* mp = m.data_ptr<float>();
  for (int64_t e = 0; e < t * hidden; ++e) xp[e] += mp[e];
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("decode_layer", &decode_layer, "one decoder layer of a decode step or a prompt chunk, in place on x",
        py::call_guard<py::gil_scoped_release>());
}
