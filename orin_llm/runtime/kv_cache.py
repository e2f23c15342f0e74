"""Preallocated, contiguous KV cache for one sequence: calibration, reference runs and tests.

The engine serves requests from the paged pool (kv_pool.py); this cache has the same surface
(reserve, write, read_unscaled, length, dtype, device), so the model runs on either.
Positions [0, length) are valid. Rolling back is `crop(n)`: nothing is copied or freed, later
writes overwrite.
"""

from __future__ import annotations

import torch

from ..arch import Arch
from ..errors import OrinError


class KVCache:
    def __init__(self, arch: Arch, capacity: int, dtype: torch.dtype, device: str | torch.device = "cpu"):
        shape = (arch.num_layers, arch.num_kv_heads, capacity, arch.head_dim)
        self.k = torch.zeros(shape, dtype=dtype, device=device)
        self.v = torch.zeros(shape, dtype=dtype, device=device)
        self.capacity = capacity
        self.length = 0

    @property
    def dtype(self) -> torch.dtype:
        """The storage dtype (int8 for an INT8 cache)."""
        return self.k.dtype

    @property
    def device(self) -> torch.device:
        return self.k.device

    @property
    def bytes_per_token(self) -> int:
        per = self.k[:, :, 0].numel() * self.k.element_size()
        return 2 * per

    @property
    def nbytes(self) -> int:
        return self.k.numel() * self.k.element_size() * 2

    def reserve(self, n: int) -> int:
        """Check that n more tokens fit; returns the position they start at."""
        if self.length + n > self.capacity:
            raise OrinError(f"sequence of {self.length + n} tokens exceeds the KV cache's "
                            f"{self.capacity} (the engine's max_seq_len)")
        return self.length

    def write(self, layer: int, pos: int, k: torch.Tensor, v: torch.Tensor) -> None:
        """k, v: [T, kv_heads, head_dim] for positions pos .. pos+T-1."""
        t = k.shape[0]
        self.k[layer, :, pos:pos + t] = k.transpose(0, 1)
        self.v[layer, :, pos:pos + t] = v.transpose(0, 1)

    def read(self, layer: int, end: int) -> tuple[torch.Tensor, torch.Tensor]:
        """K and V for positions [0, end): [kv_heads, end, head_dim] views, no copy."""
        return self.k[layer, :, :end], self.v[layer, :, :end]

    def read_unscaled(self, layer: int, end: int, dtype: torch.dtype | None = None):
        """(k, v, k_scale, v_scale): K and V without their scales ([kv_heads, end, head_dim];
        converted to `dtype` if given, else as stored: a view), and the per-KV-head scales
        ([kv_heads]) that attention folds into q and into its output (None: 1)."""
        k, v = self.k[layer, :, :end], self.v[layer, :, :end]
        if dtype is not None:
            k, v = k.to(dtype), v.to(dtype)
        return k, v, None, None

    def crop(self, length: int) -> None:
        if not 0 <= length <= self.length:
            raise ValueError(f"crop to {length} outside [0, {self.length}]")
        self.length = length


def head_scales(k_scale: torch.Tensor, v_scale: torch.Tensor, rep: int) -> tuple[torch.Tensor, torch.Tensor]:
    """[L, KV, 1, 1] K and V scales → [L, 1, H, 1, 1], one per query head (rep = heads per KV head):
    what attention multiplies q and its output by, made once instead of per layer and step."""
    def per_head(s: torch.Tensor) -> torch.Tensor:
        return s[:, :, 0, 0].repeat_interleave(rep, dim=1)[:, None, :, None, None].contiguous()
    return per_head(k_scale), per_head(v_scale)


class Int8KVCache(KVCache):
    """K/V stored as int8 with static per-layer, per-KV-head scales from calibration.

    Symmetric: q = clamp(round(x / scale), -127, 127), x ≈ q · scale. Half the bytes of fp16 per
    token; the scales are a fixed 2 × layers × kv_heads floats, whatever the length.
    """

    def __init__(self, arch: Arch, capacity: int, k_scale: torch.Tensor, v_scale: torch.Tensor,
                 dtype: torch.dtype, device: str | torch.device = "cpu"):
        expected = (arch.num_layers, arch.num_kv_heads)
        if tuple(k_scale.shape) != expected or tuple(v_scale.shape) != expected:
            raise OrinError(f"KV scales have shape {tuple(k_scale.shape)}, the model needs {expected}")
        if not (torch.all(k_scale > 0) and torch.all(v_scale > 0)):
            raise OrinError("KV scales must be positive")
        shape = (arch.num_layers, arch.num_kv_heads, capacity, arch.head_dim)
        self.k = torch.zeros(shape, dtype=torch.int8, device=device)
        self.v = torch.zeros(shape, dtype=torch.int8, device=device)
        self.k_scale = k_scale.to(device=device, dtype=dtype)[:, :, None, None]  # [L, KV, 1, 1]
        self.v_scale = v_scale.to(device=device, dtype=dtype)[:, :, None, None]
        self.compute_dtype = dtype
        self.capacity = capacity
        self.length = 0
        self._head_scales = head_scales(self.k_scale, self.v_scale, arch.num_heads // arch.num_kv_heads)
        self._slots = torch.arange(capacity, device=device)  # (int8_attention reads through slots)

    def head_scales(self, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The K and V scales per query head, [1, H, 1, 1] each (head_scales above)."""
        return self._head_scales[0][layer], self._head_scales[1][layer]

    def int8_layer(self, layer: int):
        """One layer as stored, [KV, capacity, D] int8 each, and its [KV] scales (int8_attention)."""
        return self.k[layer], self.v[layer], self.k_scale[layer, :, 0, 0], self.v_scale[layer, :, 0, 0]

    def slot_table(self, end: int) -> torch.Tensor:
        return self._slots[:end]

    @property
    def scales_nbytes(self) -> int:
        return (self.k_scale.numel() + self.v_scale.numel()) * self.k_scale.element_size()

    @staticmethod
    def _quantize(x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
        return torch.clamp(torch.round(x / scale), -127, 127).to(torch.int8)

    def write(self, layer: int, pos: int, k: torch.Tensor, v: torch.Tensor) -> None:
        t = k.shape[0]
        self.k[layer, :, pos:pos + t] = self._quantize(k.transpose(0, 1), self.k_scale[layer])
        self.v[layer, :, pos:pos + t] = self._quantize(v.transpose(0, 1), self.v_scale[layer])

    def read(self, layer: int, end: int) -> tuple[torch.Tensor, torch.Tensor]:
        k = self.k[layer, :, :end].to(self.compute_dtype) * self.k_scale[layer]
        v = self.v[layer, :, :end].to(self.compute_dtype) * self.v_scale[layer]
        return k, v

    def read_unscaled(self, layer: int, end: int, dtype: torch.dtype | None = None):
        # q·(s·k) = (s·q)·k and P·(s·v) = s·(P·v): scaling the few query and output rows instead of
        # every cached K/V halves the cost of reading a long cache (a 4k prefix: 30 × 2 × 786k values)
        k, v, _, _ = super().read_unscaled(layer, end, dtype)
        return k, v, self.k_scale[layer, :, 0, 0], self.v_scale[layer, :, 0, 0]


class AbsmaxObserver(KVCache):
    """A full-precision cache that records per-layer, per-KV-head absmax of what is written: the
    statistics static INT8 scales are derived from; and K's per channel (k_smoothing.py)."""

    def __init__(self, arch: Arch, capacity: int, dtype: torch.dtype, device: str | torch.device = "cpu"):
        super().__init__(arch, capacity, dtype, device)
        self.k_absmax = torch.zeros(arch.num_layers, arch.num_kv_heads, dtype=torch.float32, device=device)
        self.v_absmax = torch.zeros_like(self.k_absmax)
        self.k_channel_absmax = torch.zeros(arch.num_layers, arch.num_kv_heads, arch.head_dim,
                                            dtype=torch.float32, device=device)

    def write(self, layer: int, pos: int, k: torch.Tensor, v: torch.Tensor) -> None:
        super().write(layer, pos, k, v)
        # k: [T, KV, D] → max over tokens and head_dim, per KV head
        self.k_absmax[layer] = torch.maximum(self.k_absmax[layer], k.abs().amax(dim=(0, 2)).float())
        self.v_absmax[layer] = torch.maximum(self.v_absmax[layer], v.abs().amax(dim=(0, 2)).float())
        self.k_channel_absmax[layer] = torch.maximum(self.k_channel_absmax[layer], k.abs().amax(dim=0).float())
