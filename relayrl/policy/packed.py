"""Reading packed Dict observations (envs/packed.py) in torch: bytes back to one float32 tensor per key.

A packed batch reaches the network as ``data.dtypes.to_tensor`` makes every batch: float32 of the
stored values, here the bytes 0..255 (exact in float32). ``Unpack`` turns the bytes back into
uint8, slices each key's columns and reinterprets them (``Tensor.view(dtype)``): float32 keys get
their exact values back, integer keys their integers, uint8 images their pixels; every key then
becomes float32 [n, *shape], as a plain Box observation would reach an encoder. ``OnPacked`` runs
an encoder of the Dict (built-in or yours) on the unpacked batch.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import nn

from relayrl.envs import spaces as leaf_spaces
from relayrl.envs.packed import PackedDict
from relayrl.errors import EnvError

__all__ = ["Unpack", "OnPacked"]

_TORCH = {np.dtype(t): getattr(torch, name) for t, name in (
    (np.uint8, "uint8"), (np.int8, "int8"), (np.int16, "int16"), (np.int32, "int32"), (np.int64, "int64"),
    (np.uint16, "uint16"), (np.uint32, "uint32"), (np.uint64, "uint64"), (np.float32, "float32"))}


class Unpack(nn.Module):
    """Packed rows [n, nbytes] (float32 of the bytes, or uint8) -> the Dict (or Tuple) of float32 [n, *shape]."""

    def __init__(self, space: PackedDict):
        super().__init__()
        for field in space.fields:
            if field.dtype not in _TORCH:
                raise EnvError(f"observation key {field.name!r} of {space.space} has dtype {field.dtype}, which "
                               f"the networks cannot read: use one of {', '.join(map(str, _TORCH))}")
        self.space = space

    def forward(self, rows: torch.Tensor) -> Any:
        data = rows if rows.dtype == torch.uint8 else rows.to(torch.uint8)
        n = data.shape[0]  # (not len(): a traced graph would fix the batch size)
        arrays = [self._field(data[:, f.offset:f.offset + f.nbytes], f.dtype).reshape(n, *f.shape).to(torch.float32)
                  for f in self.space.fields]
        return leaf_spaces.build(self.space.space, arrays)

    @staticmethod
    def _field(columns: torch.Tensor, dtype: np.dtype) -> torch.Tensor:
        """A key's bytes as its values: uint8 keys (pixels) as they are, others reinterpreted (``view``)."""
        if dtype == np.uint8:
            return columns
        return columns.clone(memory_format=torch.contiguous_format).view(_TORCH[dtype])


class OnPacked(nn.Module):
    """``encoder`` (a module of the Dict of float32 tensors) on packed rows; its output is the features."""

    def __init__(self, space: PackedDict, encoder: nn.Module):
        super().__init__()
        self.unpack = Unpack(space)
        self.encoder = encoder

    def forward(self, rows: torch.Tensor) -> torch.Tensor:
        return self.encoder(self.unpack(rows))
