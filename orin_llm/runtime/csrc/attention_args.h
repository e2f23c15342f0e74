// The operands both INT8 attention ops take (int8_attention.h, prefill_attention.h), checked once here.
#pragma once

#include <torch/extension.h>

#include <cstdint>
#include <type_traits>

// q: [T, H, D] float32 (after RoPE, unscaled); k, v: [KV, S, D] int8, one layer of the cache;
// slots: int64, the slots of positions 0 .. pos+T-1; k_scale, v_scale: [KV] float32.
struct AttentionArgs {
  int64_t t, h, d, kv, cap;  // queries, query heads, head size, KV heads, cache slots
  torch::Tensor ks, vs;  // the scales as contiguous float32
};

inline AttentionArgs check_attention_args(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                          const torch::Tensor& slots, int64_t pos, const torch::Tensor& k_scale,
                                          const torch::Tensor& v_scale) {
  TORCH_CHECK(q.dim() == 3 && q.scalar_type() == torch::kFloat && q.is_contiguous(), "q: [T, H, D] float32");
  TORCH_CHECK(k.dim() == 3 && k.scalar_type() == torch::kChar && k.is_contiguous(), "k: [KV, S, D] int8");
  TORCH_CHECK(v.sizes() == k.sizes() && v.scalar_type() == torch::kChar && v.is_contiguous(), "v like k");
  TORCH_CHECK(slots.dim() == 1 && slots.scalar_type() == torch::kLong && slots.is_contiguous(), "slots: int64");
  const int64_t t = q.size(0), h = q.size(1), d = q.size(2), kv = k.size(0), cap = k.size(1);
  TORCH_CHECK(k.size(2) == d && (d == 64 || d == 128), "head_dim must match q's and be 64 or 128");
  TORCH_CHECK(h % kv == 0 && h / kv <= 8, "query heads must be 1 to 8 times the KV heads");
  TORCH_CHECK(slots.size(0) >= pos + t && pos >= 0, "slots must cover positions 0 .. pos+T-1");
  TORCH_CHECK(k_scale.numel() == kv && v_scale.numel() == kv, "one K and one V scale per KV head");
  const int64_t* sl = slots.data_ptr<int64_t>();
  for (int64_t i = 0; i < pos + t; ++i) TORCH_CHECK(sl[i] >= 0 && sl[i] < cap, "slot out of range");
  return {t, h, d, kv, cap, k_scale.to(torch::kFloat).contiguous(), v_scale.to(torch::kFloat).contiguous()};
}

// fn(D, G) with D, the head size (64 or 128), and G, the query heads per KV head (1 .. 8), as
// compile-time constants (std::integral_constant): both ops' kernels are templates on them, so that
// q and the accumulators stay in registers. d and g are checked by check_attention_args.
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
  return d == 64 ? with_g(std::integral_constant<int, 64>{}) : with_g(std::integral_constant<int, 128>{});
}
