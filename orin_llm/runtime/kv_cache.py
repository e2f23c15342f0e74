"""Preallocated KV cache for one sequence.

Positions [0, length) are valid. Rolling back (a rejected draft, the end of a request on top
of a pinned prefix) is `crop(n)`: nothing is copied or freed, later writes overwrite.
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

    def crop(self, length: int) -> None:
        if not 0 <= length <= self.length:
            raise ValueError(f"crop to {length} outside [0, {self.length}]")
        self.length = length
