"""Paged K/V storage: one preallocated pool of token slots per model, and a sequence's view of it.

The pool is [layers, kv_heads, slots, head_dim] for K and for V, slots = blocks × block_size, in
float or in INT8 with the calibrated static scales (per layer and KV head, as Int8KVCache). A
sequence owns a list of blocks (block_manager.py); its `PagedView` maps its positions to slots
and offers the model the same surface as the contiguous KVCache: reserve, write, read_unscaled.

Reading gathers a sequence's K/V into one contiguous tensor, converting to the compute dtype in
the same copy. Blocks that follow each other in the pool are copied as one run: a home prefix
pinned into a fresh pool is a handful of runs, so a warm request reads its K/V at the cost of the
conversion the contiguous cache paid anyway.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import torch

from ..arch import Arch
from ..errors import OrinError
from . import k_smoothing
from .kv_cache import head_scales

MAX_RUNS = 16  # past this many runs, one index_select (and a second pass to convert) is cheaper


class KVPool:
    def __init__(self, arch: Arch, num_blocks: int, block_size: int, dtype: torch.dtype,
                 device: str | torch.device = "cpu", k_scale: Optional[torch.Tensor] = None,
                 v_scale: Optional[torch.Tensor] = None):
        """dtype: the compute dtype; with k_scale/v_scale ([layers, kv_heads]) the pool is INT8."""
        self.arch, self.num_blocks, self.block_size = arch, num_blocks, block_size
        self.slots = num_blocks * block_size
        # one block past the last: the scratch block (`scratch`), never handed to a sequence, where a
        # fixed-shape step (cuda_graphs.py) writes its padding rows' K/V and points its table's unused entries
        self.scratch = num_blocks
        shape = (arch.num_layers, arch.num_kv_heads, self.slots + block_size, arch.head_dim)
        self.int8 = k_scale is not None
        store = torch.int8 if self.int8 else dtype
        # torch.empty on a CPU: pages the OS has not handed out yet cost no resident memory until
        # written. On a GPU, zeros: a masked key still enters a fixed-shape step's attention with weight
        # 0, and 0 times a NaN left in never-written float memory would be NaN
        make = torch.empty if torch.device(device).type == "cpu" else torch.zeros
        self.k = make(shape, dtype=store, device=device)
        self.v = make(shape, dtype=store, device=device)
        self.dtype = dtype
        self._layers = [(self.k[i], self.v[i]) for i in range(arch.num_layers)]  # (views: no op per step)
        if self.int8:
            expected = (arch.num_layers, arch.num_kv_heads)
            if tuple(k_scale.shape) != expected or tuple(v_scale.shape) != expected:
                raise OrinError(f"KV scales have shape {tuple(k_scale.shape)}, the model needs {expected}")
            if not (torch.all(k_scale > 0) and torch.all(v_scale > 0)):
                raise OrinError("KV scales must be positive")
            self.k_scale = k_scale.to(device=device, dtype=dtype)[:, :, None, None]  # [L, KV, 1, 1]
            self.v_scale = v_scale.to(device=device, dtype=dtype)[:, :, None, None]
            # per layer, as Python lists: indexing a tensor by layer is an op, on every layer of every step
            hk, hv = head_scales(self.k_scale, self.v_scale, arch.num_heads // arch.num_kv_heads)
            layers = range(arch.num_layers)
            self._head_scales = [(hk[i], hv[i]) for i in layers]
            self._scales = [(self.k_scale[i, :, 0, 0], self.v_scale[i, :, 0, 0]) for i in layers]
            self._write_scales = [(self.k_scale[i], self.v_scale[i]) for i in layers]

    @property
    def device(self) -> torch.device:
        return self.k.device

    @property
    def bytes_per_token(self) -> int:
        return 2 * self.arch.num_layers * self.arch.num_kv_heads * self.arch.head_dim * self.k.element_size()

    @property
    def nbytes(self) -> int:
        """The pool's bytes for its blocks (the one scratch block left out)."""
        return self.bytes_per_token * self.slots

    def write(self, layer: int, slots: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
        """k, v: [T, kv_heads, head_dim] for the T slots given."""
        k, v = k.transpose(0, 1), v.transpose(0, 1)  # [KV, T, D]
        pk, pv = self._layers[layer]
        if self.int8:
            ks, vs = self._write_scales[layer]
            k, v = _quantize(k, ks), _quantize(v, vs)
        elif k.dtype != pk.dtype:  # a float cache in another dtype than the model computes in (fp16 on bf16)
            k, v = k.to(pk.dtype), v.to(pk.dtype)
        pk.index_copy_(1, slots, k)
        pv.index_copy_(1, slots, v)

    def gather(self, layer: int, runs: list[tuple[int, int]], length: int, dtype: torch.dtype):
        """K and V of `length` tokens stored in `runs` ((first slot, count), in order), as [KV, length, D]."""
        kv, d = self.arch.num_kv_heads, self.arch.head_dim
        pk, pv = self._layers[layer]
        if len(runs) == 1:  # one contiguous run: a view, converted only if the dtype differs
            s, _ = runs[0]
            return pk[:, s:s + length].to(dtype), pv[:, s:s + length].to(dtype)
        if len(runs) > MAX_RUNS:
            idx = torch.cat([torch.arange(s, s + n, device=self.device) for s, n in runs])
            return pk.index_select(1, idx).to(dtype), pv.index_select(1, idx).to(dtype)
        k = torch.empty(kv, length, d, dtype=dtype, device=self.device)
        v = torch.empty(kv, length, d, dtype=dtype, device=self.device)
        at = 0
        for s, n in runs:  # copy_ converts as it copies: one pass over the cached bytes
            k[:, at:at + n].copy_(pk[:, s:s + n])
            v[:, at:at + n].copy_(pv[:, s:s + n])
            at += n
        return k, v

    def gather_index(self, layer: int, slots: torch.Tensor, dtype: torch.dtype):
        """K and V at `slots` ([N] slot ids, in order), as [KV, N, D] in `dtype`: one gather each."""
        pk, pv = self._layers[layer]
        return pk.index_select(1, slots).to(dtype), pv.index_select(1, slots).to(dtype)

    def gather_slots(self, layer: int, key_slots: torch.Tensor, dtype: torch.dtype):
        """K and V at `key_slots` ([B, N] slot ids: each sequence's block table expanded), as
        [B, KV, N, D] in `dtype`: a fixed-shape read for a step captured in a CUDA graph (cuda_graphs.py)."""
        pk, pv = self._layers[layer]
        b, n = key_slots.shape
        flat = key_slots.reshape(-1)

        def read(t: torch.Tensor) -> torch.Tensor:
            return t.index_select(1, flat).view(t.shape[0], b, n, t.shape[2]).transpose(0, 1).to(dtype)

        return read(pk), read(pv)

    def layer_tensors(self, layer: int):
        """One layer as stored, [KV, slots, D] each, and its [KV] scales (None, None for a float pool)."""
        return (*self._layers[layer], *self.scales(layer))

    def head_scales(self, layer: int):
        """The K and V scales per query head, [1, H, 1, 1] each (kv_cache.head_scales)."""
        return self._head_scales[layer]

    def scales(self, layer: int):
        return self._scales[layer] if self.int8 else (None, None)

    def int8_layer(self, layer: int):
        """One layer of an INT8 pool as stored, [KV, slots, D] int8 each, and its [KV] scales."""
        return (*self._layers[layer], *self._scales[layer])


def _quantize(x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    return torch.clamp(torch.round(x / scale), -127, 127).to(torch.int8)


class PagedView:
    """A sequence's K/V in the pool, with the surface Llama.forward uses (as KVCache): `length`
    tokens are computed; `reserve(t)` checks that t more fit its blocks and returns their start."""

    def __init__(self, pool: KVPool, blocks: list[int], length: int = 0):
        self.pool = pool
        self.blocks = blocks  # the block table: shared with the sequence, which appends to it
        self.length = length
        self._slot_cache: Optional[torch.Tensor] = None
        self._slot_blocks = 0
        self._runs: tuple[tuple[int, int], list[tuple[int, int]]] = ((-1, -1), [])  # per forward, not per layer
        self._prefill: tuple[tuple[int, int, int], tuple] = ((-1, -1, -1), ())  # likewise

    @property
    def capacity(self) -> int:
        return len(self.blocks) * self.pool.block_size

    @property
    def dtype(self) -> torch.dtype:
        return self.pool.k.dtype

    @property
    def device(self) -> torch.device:
        return self.pool.device

    def reserve(self, n: int) -> int:
        if self.length + n > self.capacity:
            raise OrinError(f"sequence of {self.length + n} tokens exceeds its {self.capacity} KV slots")
        return self.length

    def slots(self, start: int, end: int) -> torch.Tensor:
        if self._slot_cache is None or self._slot_blocks != len(self.blocks):
            bs = self.pool.block_size
            ids = torch.tensor(self.blocks, dtype=torch.long, device=self.device)
            self._slot_cache = (ids[:, None] * bs + torch.arange(bs, device=self.device)).flatten()
            self._slot_blocks = len(self.blocks)
        return self._slot_cache[start:end]

    def prefill_args(self, pos: int, rows: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """A chunk of `rows` new rows at `pos` as the Triton paged prefill kernel takes it (one sequence):
        its block table [1, blocks], length [1] and row offsets [2], int32, made by one copy per forward
        (not per layer)."""
        key = (pos, rows, len(self.blocks))
        if self._prefill[0] != key:
            flat = torch.tensor([pos + rows, 0, rows, *self.blocks], dtype=torch.int32).to(self.device)
            self._prefill = (key, (flat[3:].view(1, -1), flat[:1], flat[1:3]))
        return self._prefill[1]

    def runs(self, end: int) -> list[tuple[int, int]]:
        """(first slot, count) of the stretches of contiguous slots holding positions [0, end)."""
        key = (end, len(self.blocks))
        if self._runs[0] != key:
            self._runs = (key, self._find_runs(end))
        return self._runs[1]

    def _find_runs(self, end: int) -> list[tuple[int, int]]:
        bs, out = self.pool.block_size, []
        for i in range((end + bs - 1) // bs):
            n = min(bs, end - i * bs)
            s = self.blocks[i] * bs
            if out and out[-1][0] + out[-1][1] == s and out[-1][1] % bs == 0:
                out[-1] = (out[-1][0], out[-1][1] + n)
            else:
                out.append((s, n))
        return out

    def write(self, layer: int, pos: int, k: torch.Tensor, v: torch.Tensor) -> None:
        self.pool.write(layer, self.slots(pos, pos + k.shape[0]), k, v)

    def head_scales(self, layer: int):
        return self.pool.head_scales(layer)

    def int8_layer(self, layer: int):
        return self.pool.int8_layer(layer)

    def slot_table(self, end: int) -> torch.Tensor:
        """The slots of positions [0, end), int64 (what int8_attention reads through)."""
        return self.slots(0, end)

    def read_unscaled(self, layer: int, end: int, dtype: Optional[torch.dtype] = None):
        runs = self.runs(end)
        if len(runs) > 1 and self.pool.device.type != "cpu":
            # on a GPU every copy is a kernel launch: one gather through the slot table (made once per
            # block count) instead of a copy per run, or an arange per run past MAX_RUNS, in every layer
            k, v = self.pool.gather_index(layer, self.slots(0, end), dtype or self.pool.dtype)
        else:
            k, v = self.pool.gather(layer, runs, end, dtype or self.pool.dtype)
        return (k, v, *self.pool.scales(layer))


def load_scales(path: Path) -> tuple[torch.Tensor, torch.Tensor]:
    """The calibrated static INT8 KV scales (per layer and KV head) that build/calibrate.py wrote."""
    t = _scales_file(path)
    return t["k_scale"], t["v_scale"]


def load_k_smoothing(path: Path) -> Optional[torch.Tensor]:
    """The K smoothing factors (runtime/k_smoothing.py) calibrate.py wrote beside the scales, or None
    (an engine calibrated before them: its keys unsmoothed, as its K scales were made for)."""
    return _scales_file(path).get(k_smoothing.KEY)


def _scales_file(path: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    if not path.is_file():
        raise OrinError(f"KV scales file {path} is missing; run `orin-llm calibrate --engine DIR`")
    t = load_file(str(path))
    if not {"k_scale", "v_scale"} <= set(t) <= {"k_scale", "v_scale", k_smoothing.KEY}:
        raise OrinError(f"{path}: expected tensors k_scale and v_scale (and {k_smoothing.KEY}), found {sorted(t)}")
    return t
