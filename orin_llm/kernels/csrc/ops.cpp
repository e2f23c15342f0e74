// The one extension module of our C++ ops (kernels/native.py builds it at install: `make install`):
// torch wrappers, argument checks and threads around the kernel cores (kernels/, torch-free).
//   q4_1_linear, q8_linear, quantize_activations: kernels/q8_dot.py
//   int8_decode_attention: kernels/int8_attention.py
//   int8_prefill_attention: kernels/prefill_attention.py (x86 AVX-512 VNNI + BF16 builds only)
//   decode_layer, LayerWeights: kernels/decode_layer.py
//   simd, attention_simd, prefill_simd, constants: what this build runs, and the constants the
//   Python side packs for (native.py checks them at load)
// Every op releases the GIL while it computes (the daemon's event loop shares the process).
#include <torch/extension.h>

#include <ATen/Parallel.h>

#include "kernels/dispatch.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

namespace {

using orin::BLOCK;
using orin::QROWS;
using orin::ROWS;

static_assert(sizeof(at::Half) == sizeof(orin::half16), "at::Half is an IEEE half");

// ---- q8_dot: quantized weights times integer-quantized activations ----

struct QuantizedX {
  torch::Tensor q, d, s;
};

template <typename Q, int QMAX>
QuantizedX quantize(const torch::Tensor& x) {
  const int64_t m = x.size(0), k = x.size(1), nb = k / BLOCK;
  const auto dtype = sizeof(Q) == 1 ? torch::kChar : torch::kShort;
  QuantizedX r{torch::empty({m, k}, dtype), torch::empty({m, nb}, torch::kFloat), torch::empty({m, nb}, torch::kFloat)};
  orin::quantize_rows<Q, QMAX>(x.data_ptr<float>(), m, k, static_cast<Q*>(r.q.data_ptr()), r.d.data_ptr<float>(),
                               r.s.data_ptr<float>());
  return r;
}

// The Q4_1 layers' activations: split 16-bit codes, q [M, 2K] int8 (each row's hi plane, then its lo).
QuantizedX quantize_split(const torch::Tensor& x) {
  const int64_t m = x.size(0), k = x.size(1), nb = k / BLOCK;
  QuantizedX r{torch::empty({m, 2 * k}, torch::kChar), torch::empty({m, nb}, torch::kFloat),
               torch::empty({m, nb}, torch::kFloat)};
  orin::quantize_rows_split(x.data_ptr<float>(), m, k, r.q.data_ptr<int8_t>(), r.d.data_ptr<float>(),
                            r.s.data_ptr<float>());
  return r;
}

void check_x(const torch::Tensor& x, int64_t k) {
  TORCH_CHECK(x.dim() == 2 && x.scalar_type() == torch::kFloat && x.is_contiguous(), "x: [M, K] float32");
  TORCH_CHECK(x.size(1) == k, "x has ", x.size(1), " columns, the weights ", k);
}

template <typename S, typename T>
torch::Tensor q4_1_run(const torch::Tensor& x, const torch::Tensor& codes, const torch::Tensor& scales,
                       const torch::Tensor& mins) {
  const int64_t tiles = codes.size(0), n = tiles * QROWS, k = codes.size(1) * 2 * BLOCK, m = x.size(0);
  const QuantizedX qx = quantize_split(x);
  auto out = torch::empty({m, n}, torch::kFloat);
  const S* sc = reinterpret_cast<const S*>(scales.data_ptr<T>());
  const S* mn = reinterpret_cast<const S*>(mins.data_ptr<T>());
  at::parallel_for(0, tiles, orin::GRAIN, [&](int64_t begin, int64_t end) {
    orin::q4_1_tiles<orin::Q8Kernels, S>(codes.data_ptr<uint8_t>(), sc, mn, n, k, qx.q.data_ptr<int8_t>(),
                                         qx.d.data_ptr<float>(), qx.s.data_ptr<float>(), m, begin, end,
                                         out.data_ptr<float>());
  });
  return out;
}

// x: [M, K] float32; codes: [N/8, K/64, 8, 32] uint8, scales and mins: [N/8, K/32, 8] float32 or
// both float16, as q8_dot.pack_q4_1 lays them out. Returns x @ Wᵀ [M, N] float32, W = scale·code +
// min per block of 32.
torch::Tensor q4_1_linear(torch::Tensor x, torch::Tensor codes, torch::Tensor scales, torch::Tensor mins) {
  TORCH_CHECK(codes.dim() == 4 && codes.size(2) == 8 && codes.size(3) == 32 &&
              codes.scalar_type() == torch::kByte && codes.is_contiguous(), "codes: [N/8, K/64, 8, 32] uint8");
  const int64_t tiles = codes.size(0), k = codes.size(1) * 2 * BLOCK, nb = k / BLOCK;
  const bool half = scales.scalar_type() == torch::kHalf;
  for (const auto* t : {&scales, &mins})
    TORCH_CHECK(t->dim() == 3 && t->size(0) == tiles && t->size(1) == nb && t->size(2) == QROWS &&
                t->scalar_type() == (half ? torch::kHalf : torch::kFloat) && t->is_contiguous(),
                "scales and mins: [N/8, K/32, 8], both float32 or both float16");
  check_x(x, k);
  return half ? q4_1_run<orin::half16, at::Half>(x, codes, scales, mins) : q4_1_run<float, float>(x, codes, scales, mins);
}

// x: [M, K] float32; codes: [N/8, K/32, 16, 16] int8 (q8_dot.pack_q8); scales: [N] float32. Returns
// x @ (scales·codes)ᵀ [M, N] float32, x quantized to int16 in blocks of 32 (head.py bounds the error).
torch::Tensor q8_linear(torch::Tensor x, torch::Tensor codes, torch::Tensor scales) {
  TORCH_CHECK(codes.dim() == 4 && codes.size(2) == BLOCK / 2 && codes.size(3) == 2 * ROWS &&
              codes.scalar_type() == torch::kChar && codes.is_contiguous(), "codes: [N/8, K/32, 16, 16] int8");
  const int64_t tiles = codes.size(0), n = tiles * ROWS, k = codes.size(1) * BLOCK;
  TORCH_CHECK(scales.dim() == 1 && scales.size(0) == n && scales.scalar_type() == torch::kFloat &&
              scales.is_contiguous(), "scales: [N] float32");
  check_x(x, k);
  const int64_t m = x.size(0);
  const QuantizedX qx = quantize<int16_t, 32767>(x);
  auto out = torch::empty({m, n}, torch::kFloat);
  at::parallel_for(0, tiles, orin::GRAIN, [&](int64_t begin, int64_t end) {
    orin::q8_tiles<orin::Q8Kernels>(codes.data_ptr<int8_t>(), scales.data_ptr<float>(), n, k,
                                    qx.q.data_ptr<int16_t>(), qx.d.data_ptr<float>(), m, begin, end,
                                    out.data_ptr<float>());
  });
  return out;
}

// The activation quantization alone (tests, head.py's bound): codes and scales [M, K/32] float32; the
// codes [M, K] int16 as q8_linear takes them (bits 16), or q4_1_linear's split 16-bit codes as the
// int16 values they stand for (bits 15: 256·hi + lo, |q| <= SPLIT_QMAX).
std::vector<torch::Tensor> quantize_activations(torch::Tensor x, int64_t bits) {
  TORCH_CHECK(x.dim() == 2 && x.size(1) % BLOCK == 0, "x: [M, K] with K a multiple of 32");
  TORCH_CHECK(bits == 15 || bits == 16, "bits: 15 (q4_1_linear's split codes) or 16 (q8_linear's)");
  check_x(x, x.size(1));
  if (bits == 16) {
    const QuantizedX qx = quantize<int16_t, 32767>(x);
    return {qx.q, qx.d};
  }
  const QuantizedX qx = quantize_split(x);
  const int64_t k = x.size(1);
  auto hl = qx.q.view({x.size(0), 2, k}).to(torch::kShort);
  return {hl.select(1, 0) * 256 + hl.select(1, 1), qx.d};
}

// ---- the INT8 attention ops ----

// q: [T, H, D] float32 (after RoPE, unscaled); k, v: [KV, S, D] int8, one layer of the cache;
// slots: int64, the slots of positions 0 .. pos+T-1; k_scale, v_scale: [KV]. The scales are made
// contiguous float32 (kept alive in the returned pair with the view that points at them).
struct CheckedAttention {
  orin::AttentionView view;
  torch::Tensor ks, vs;
};

CheckedAttention check_attention_args(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                      const torch::Tensor& slots, int64_t pos, const torch::Tensor& k_scale,
                                      const torch::Tensor& v_scale, torch::Tensor& out) {
  TORCH_CHECK(q.dim() == 3 && q.scalar_type() == torch::kFloat && q.is_contiguous(), "q: [T, H, D] float32");
  TORCH_CHECK(k.dim() == 3 && k.scalar_type() == torch::kChar && k.is_contiguous(), "k: [KV, S, D] int8");
  TORCH_CHECK(v.sizes() == k.sizes() && v.scalar_type() == torch::kChar && v.is_contiguous(), "v like k");
  TORCH_CHECK(slots.dim() == 1 && slots.scalar_type() == torch::kLong && slots.is_contiguous(), "slots: int64");
  const int64_t t = q.size(0), h = q.size(1), d = q.size(2), kv = k.size(0), cap = k.size(1);
  TORCH_CHECK(k.size(2) == d && (d == orin::HEAD_DIM_A || d == orin::HEAD_DIM_B),
              "head_dim must match q's and be 64 or 128");
  TORCH_CHECK(h % kv == 0 && h / kv <= orin::MAX_GROUP, "query heads must be 1 to 8 times the KV heads");
  TORCH_CHECK(slots.size(0) >= pos + t && pos >= 0, "slots must cover positions 0 .. pos+T-1");
  TORCH_CHECK(k_scale.numel() == kv && v_scale.numel() == kv, "one K and one V scale per KV head");
  const int64_t* sl = slots.data_ptr<int64_t>();
  for (int64_t i = 0; i < pos + t; ++i) TORCH_CHECK(sl[i] >= 0 && sl[i] < cap, "slot out of range");
  CheckedAttention c{{}, k_scale.to(torch::kFloat).contiguous(), v_scale.to(torch::kFloat).contiguous()};
  out = torch::empty_like(q);
  c.view = {q.data_ptr<float>(), k.data_ptr<int8_t>(), v.data_ptr<int8_t>(), sl, c.ks.data_ptr<float>(),
            c.vs.data_ptr<float>(), t, h, d, kv, cap, pos, out.data_ptr<float>()};
  return c;
}

// Query t sees positions 0 .. pos+t. Returns [T, H, D] float32: softmax(q·kᵀ/√D)·v in real units.
torch::Tensor int8_decode_attention(torch::Tensor q, torch::Tensor k, torch::Tensor v, torch::Tensor slots,
                                    int64_t pos, torch::Tensor k_scale, torch::Tensor v_scale) {
  torch::Tensor out;
  const CheckedAttention c = check_attention_args(q, k, v, slots, pos, k_scale, v_scale, out);
  at::parallel_for(0, orin::decode_attention_work(c.view), 1, [&](int64_t begin, int64_t end) {
    orin::decode_attention_items<orin::AttnKernels>(c.view, begin, end);
  });
  return out;
}

// The same attention for a prompt's queries (positions pos .. pos+T-1, whose K/V the cache holds):
// q rounded to int16 per row times the int8 keys, a float32 softmax, bf16 weights times the values.
torch::Tensor int8_prefill_attention(torch::Tensor q, torch::Tensor k, torch::Tensor v, torch::Tensor slots,
                                     int64_t pos, torch::Tensor k_scale, torch::Tensor v_scale) {
  TORCH_CHECK(orin::HAS_PREFILL, "built without AVX-512 VNNI and BF16: prompt attention runs torch's ops");
  torch::Tensor out;
  const CheckedAttention c = check_attention_args(q, k, v, slots, pos, k_scale, v_scale, out);
#ifdef ORIN_X86_PREFILL
  at::parallel_for(0, orin::prefill_attention_work(c.view), 1, [&](int64_t begin, int64_t end) {
    orin::prefill_attention_items(c.view, begin, end);
  });
#endif
  return out;
}

// ---- the fused decode layer ----
//
// One decoder layer of a decode or verify step, or of a prompt chunk, in one call: the same kernels
// as the per-op path, with the small ops between them (RMSNorm, RoPE, the INT8 K/V write, SiLU·up,
// the residual adds: common.h) done here on the rows in place, where torch needed about 150 op calls
// a layer for them. Every row is computed on its own, in a fixed order that depends only on that row
// (and, for attention, on its sequence's cached keys): a row's result does not depend on which other
// rows or sequences share the call. The small ops round differently from torch's (another summation
// order in the norm, no separate rounding of RoPE's two products): the model's decode steps all take
// this path or all take torch's (llama.py), never a mix within one model.

// One layer's weights, made once at load (decode_layer.py layer_args): the input and
// post-attention RMSNorm weights [hidden], their eps, and each linear layer's q8_dot tiles
// ((codes, scales, mins) for Q4_1, (codes, scales) for int8).
struct LayerWeights {
  torch::Tensor norm1, norm2;
  double eps;
  std::vector<torch::Tensor> qkv, o, gate_up, down;
};

// One sequence's part of the step: its cache layer (K, V [KV, S, D] int8, their [KV] scales, the
// slots of positions 0 .. pos+rows-1), its first position, its row count, and its first row that
// attends with the prompt op (the rows before it, and all rows where it is `rows` or more, attend
// with the decode op).
struct SequenceCache {
  torch::Tensor k, v, k_scale, v_scale, slots;
  int64_t pos, rows, prompt_from;
};

torch::Tensor linear(const torch::Tensor& x, const std::vector<torch::Tensor>& w) {
  TORCH_CHECK(w.size() == 3 || w.size() == 2, "a linear layer is (codes, scales, mins) or (codes, scales)");
  return w.size() == 3 ? q4_1_linear(x, w[0], w[1], w[2]) : q8_linear(x, w[0], w[1]);
}

void check_float(const torch::Tensor& t, const char* what) {
  TORCH_CHECK(t.scalar_type() == torch::kFloat && t.is_contiguous(), what, ": contiguous float32");
}

// x: [T, hidden] float32, the residual stream of every row of the step (the sequences' rows in
// order), updated in place. cos, sin: rope_tables' [P, 1, head_dim].
void decode_layer_run(torch::Tensor x, const LayerWeights& w, const torch::Tensor& cos, const torch::Tensor& sin,
                      int64_t heads, int64_t kv_heads, const std::vector<SequenceCache>& seqs) {
  check_float(x, "x");
  TORCH_CHECK(x.dim() == 2, "x: [T, hidden]");
  const int64_t t = x.size(0), hidden = x.size(1);
  check_float(w.norm1, "norm1");
  check_float(w.norm2, "norm2");
  check_float(cos, "cos");
  check_float(sin, "sin");
  TORCH_CHECK(w.norm1.numel() == hidden && w.norm2.numel() == hidden, "norm weights: [hidden]");
  TORCH_CHECK(cos.dim() == 3 && cos.sizes() == sin.sizes(), "cos, sin: [P, 1, head_dim]");
  const int64_t d = cos.size(2), positions = cos.size(0);
  TORCH_CHECK(d == orin::HEAD_DIM_A || d == orin::HEAD_DIM_B, "head_dim must be 64 or 128");
  int64_t total = 0;
  for (const SequenceCache& s : seqs) {
    TORCH_CHECK(s.pos >= 0 && s.rows > 0 && s.pos + s.rows <= positions, "positions past the rope tables");
    total += s.rows;
  }
  TORCH_CHECK(total == t, "the sequences' rows must add up to x's");
  const float fe = static_cast<float>(w.eps);
  float* xp = x.data_ptr<float>();

  auto h = torch::empty({t, hidden}, torch::kFloat);
  for (int64_t r = 0; r < t; ++r)
    orin::rms_norm(xp + r * hidden, w.norm1.data_ptr<float>(), hidden, fe, h.data_ptr<float>() + r * hidden);
  auto y = linear(h, w.qkv);  // [T, (H + 2·KV)·D]: q, k and v heads side by side
  const int64_t width = (heads + 2 * kv_heads) * d;
  TORCH_CHECK(y.size(1) == width, "qkv has ", y.size(1), " outputs, the heads need ", width);
  float* yp = y.data_ptr<float>();

  auto attn = torch::empty({t, heads * d}, torch::kFloat);
  int64_t row = 0;
  for (const SequenceCache& s : seqs) {
    const torch::Tensor &k = s.k, &v = s.v, &slots = s.slots;
    TORCH_CHECK(k.scalar_type() == torch::kChar && k.is_contiguous() && k.dim() == 3 && k.size(0) == kv_heads &&
                k.size(2) == d && v.sizes() == k.sizes() && v.scalar_type() == torch::kChar && v.is_contiguous(),
                "K, V: [KV, S, D] int8");
    TORCH_CHECK(slots.scalar_type() == torch::kLong && slots.dim() == 1 && slots.size(0) >= s.pos + s.rows,
                "slots: int64, covering positions 0 .. pos+t-1");
    const torch::Tensor ks = s.k_scale.to(torch::kFloat).contiguous();
    const torch::Tensor vs = s.v_scale.to(torch::kFloat).contiguous();
    TORCH_CHECK(ks.numel() == kv_heads && vs.numel() == kv_heads, "one K and one V scale per KV head");
    const int64_t cap = k.size(1);
    const int64_t* sl = slots.data_ptr<int64_t>();
    auto q = torch::empty({s.rows, heads, d}, torch::kFloat);
    for (int64_t j = 0; j < s.rows; ++j) {
      const int64_t p = s.pos + j, slot = sl[p];
      TORCH_CHECK(slot >= 0 && slot < cap, "slot out of range");
      float* yr = yp + (row + j) * width;
      orin::rope(yr, heads + kv_heads, d, cos.data_ptr<float>() + p * d, sin.data_ptr<float>() + p * d);
      std::copy(yr, yr + heads * d, q.data_ptr<float>() + j * heads * d);
      for (int64_t g = 0; g < kv_heads; ++g) {  // this position's K and V, into the cache
        const float *kr = yr + (heads + g) * d, *vr = yr + (heads + kv_heads + g) * d;
        int8_t* kc = k.data_ptr<int8_t>() + (g * cap + slot) * d;
        int8_t* vc = v.data_ptr<int8_t>() + (g * cap + slot) * d;
        const float ksg = ks.data_ptr<float>()[g], vsg = vs.data_ptr<float>()[g];
        for (int64_t c = 0; c < d; ++c) {
          kc[c] = orin::quantize_kv(kr[c], ksg);
          vc[c] = orin::quantize_kv(vr[c], vsg);
        }
      }
    }
    const int64_t first = std::max<int64_t>(0, std::min(s.prompt_from, s.rows));
    torch::Tensor out;  // [rows, H, D]
    if (first == s.rows) {
      out = int8_decode_attention(q, k, v, slots, s.pos, ks, vs);
    } else if (first == 0) {
      out = int8_prefill_attention(q, k, v, slots, s.pos, ks, vs);
    } else {  // a prompt chunk whose first blocks end before MIN_KEYS keys (llama.py _fused_layers)
      out = torch::cat({int8_decode_attention(q.narrow(0, 0, first).contiguous(), k, v, slots, s.pos, ks, vs),
                        int8_prefill_attention(q.narrow(0, first, s.rows - first).contiguous(), k, v, slots,
                                               s.pos + first, ks, vs)});
    }
    std::copy(out.data_ptr<float>(), out.data_ptr<float>() + s.rows * heads * d,
              attn.data_ptr<float>() + row * heads * d);
    row += s.rows;
  }

  auto a = linear(attn, w.o);
  TORCH_CHECK(a.size(1) == hidden, "o_proj must give hidden outputs");
  const float* ap = a.data_ptr<float>();
  for (int64_t e = 0; e < t * hidden; ++e) xp[e] += ap[e];

  for (int64_t r = 0; r < t; ++r)
    orin::rms_norm(xp + r * hidden, w.norm2.data_ptr<float>(), hidden, fe, h.data_ptr<float>() + r * hidden);
  auto gu = linear(h, w.gate_up);  // [T, 2·I]: gate, then up
  const int64_t inter = gu.size(1) / 2;
  auto act = torch::empty({t, inter}, torch::kFloat);
  const float* gp = gu.data_ptr<float>();
  float* actp = act.data_ptr<float>();
  for (int64_t r = 0; r < t; ++r)
    for (int64_t c = 0; c < inter; ++c) actp[r * inter + c] = orin::silu_mul(gp[r * 2 * inter + c], gp[r * 2 * inter + inter + c]);
  auto m = linear(act, w.down);
  TORCH_CHECK(m.size(1) == hidden, "down_proj must give hidden outputs");
  const float* mp = m.data_ptr<float>();
  for (int64_t e = 0; e < t * hidden; ++e) xp[e] += mp[e];
}

// The Python call (llama.py _fused_layers): per sequence, in row order, `caches` holds its cache
// layer as five tensors (K, V, k_scale, v_scale, slots), named here once (SequenceCache).
void decode_layer(torch::Tensor x, const LayerWeights& layer, torch::Tensor cos, torch::Tensor sin, int64_t heads,
                  int64_t kv_heads, std::vector<torch::Tensor> caches, std::vector<int64_t> pos,
                  std::vector<int64_t> rows, std::vector<int64_t> prompt_from) {
  TORCH_CHECK(pos.size() == rows.size() && caches.size() == 5 * pos.size() && prompt_from.size() == pos.size(),
              "5 cache tensors, a pos, a row count and a prompt_from per sequence");
  std::vector<SequenceCache> seqs;
  seqs.reserve(pos.size());
  for (size_t i = 0; i < pos.size(); ++i)
    seqs.push_back({caches[5 * i], caches[5 * i + 1], caches[5 * i + 2], caches[5 * i + 3], caches[5 * i + 4],
                    pos[i], rows[i], prompt_from[i]});
  decode_layer_run(x, layer, cos, sin, heads, kv_heads, seqs);
}

// ---- what this build is ----

py::dict constants() {
  py::dict c;
  c["BLOCK"] = orin::BLOCK;
  c["ROWS"] = orin::ROWS;
  c["QROWS"] = orin::QROWS;
  c["HEAD_DIMS"] = py::make_tuple(orin::HEAD_DIM_A, orin::HEAD_DIM_B);
  c["MAX_GROUP"] = orin::MAX_GROUP;
  c["QPOS"] = orin::QPOS;
  c["KT"] = orin::KT;
  c["SPLIT_QMAX"] = orin::SPLIT_QMAX;
  return c;
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  using release = py::call_guard<py::gil_scoped_release>;
  m.def("simd", [] { return std::string(orin::Q8Kernels::name); },
        "the q8 kernels' code path: avx2-vnni, avx2, neon-dotprod or generic (plain loops)");
  m.def("attention_simd", [] { return std::string(orin::AttnKernels::name); },
        "the decode attention scores' code path: avx512, neon or generic");
  m.def("prefill_simd", [] { return orin::HAS_PREFILL; },
        "whether this build has the prompt attention op (x86 AVX-512 VNNI and BF16)");
  m.def("constants", &constants, "the tile, block and head constants the kernels are compiled for");
  m.def("q4_1_linear", &q4_1_linear, "Q4_1 weights x 16-bit activations (split in two byte planes)", release());
  m.def("q8_linear", &q8_linear, "int8 per-row weights x int16 activations", release());
  m.def("quantize_activations", &quantize_activations, "integer codes and scales of x, blocks of 32");
  m.def("int8_decode_attention", &int8_decode_attention, "decode attention over an INT8 KV cache", release());
  m.def("int8_prefill_attention", &int8_prefill_attention, "prompt attention over an INT8 KV cache", release());
  py::class_<LayerWeights>(m, "LayerWeights", "one decoder layer's weights for decode_layer")
      .def(py::init<torch::Tensor, torch::Tensor, double, std::vector<torch::Tensor>, std::vector<torch::Tensor>,
                    std::vector<torch::Tensor>, std::vector<torch::Tensor>>(),
           py::arg("norm1"), py::arg("norm2"), py::arg("eps"), py::arg("qkv"), py::arg("o"), py::arg("gate_up"),
           py::arg("down"))
      .def_readonly("eps", &LayerWeights::eps);
  m.def("decode_layer", &decode_layer, "one decoder layer of a decode step or a prompt chunk, in place on x",
        py::arg("x"), py::arg("layer"), py::arg("cos"), py::arg("sin"), py::arg("heads"), py::arg("kv_heads"),
        py::arg("caches"), py::arg("pos"), py::arg("rows"), py::arg("prompt_from"), release());
}
