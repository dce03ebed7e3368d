"""Hybrid actions: continuous values and discrete branches in one action (an ML-Agents behaviour with both).

The space is Gymnasium's ``Tuple((Box(low, high, (C,)), MultiDiscrete(branches)))``: the two parts in
ML-Agents' ``ActionTuple`` order (continuous, then discrete), so ``space.sample()`` and a deployed
policy's output have the same shape as what the simulator takes. (Gymnasium has no hybrid space of its
own; a Tuple keeps the order fixed without key names to agree on, which a Dict would need.)

Inside relayrl a hybrid action travels as one float32 row ``[C + B]``: the continuous values, then the
branch indices as floats (exact up to 2**24). That is ``PolicyOutput.action`` and ``env_action``, so the
collectors, rollouts, replay and workers carry it as any Box action; ``HybridLayout.split`` gives the two
parts back where they leave (the bridge's ``set_actions``, ``predict``). Action masks apply to the discrete
part only: ``sum(branches)`` booleans, one block per branch (relayrl/envs/masks.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import gymnasium as gym
import numpy as np

from relayrl.errors import EnvError

__all__ = ["HybridLayout", "hybrid_layout", "hybrid_space"]


def hybrid_space(continuous: int, branches: Sequence[int], low: float = -1.0, high: float = 1.0) -> gym.spaces.Tuple:
    """``Tuple((Box(low, high, (continuous,)), MultiDiscrete(branches)))``, the space of a hybrid action."""
    return gym.spaces.Tuple((gym.spaces.Box(low, high, (int(continuous),), np.float32),
                             gym.spaces.MultiDiscrete([int(b) for b in branches])))


@dataclass(frozen=True)
class HybridLayout:
    """Where the parts of a hybrid action's float32 row are: ``continuous`` values, then ``len(branches)`` indices."""

    continuous: int
    branches: tuple[int, ...]

    @property
    def width(self) -> int:
        return self.continuous + len(self.branches)

    def describe(self) -> str:
        return (f"{self.width} columns: {self.continuous} continuous values, then the indices of branches "
                f"{list(self.branches)}")

    def split(self, rows: np.ndarray, where: str = "hybrid actions") -> tuple[np.ndarray, np.ndarray]:
        """``rows`` [n, C + B] as (continuous [n, C] float32, discrete [n, B] int64); an EnvError for a wrong width."""
        rows = np.asarray(rows)
        if rows.ndim != 2 or rows.shape[1] != self.width:
            raise EnvError(f"{where} have shape {rows.shape}, expected (n, {self.width}): one row per agent of "
                           f"{self.describe()}")
        return rows[:, :self.continuous].astype(np.float32), np.rint(rows[:, self.continuous:]).astype(np.int64)

    def join(self, continuous: np.ndarray, discrete: np.ndarray) -> np.ndarray:
        """The [n, C + B] float32 rows of (continuous [n, C], discrete [n, B])."""
        return np.concatenate([np.asarray(continuous, np.float32), np.asarray(discrete, np.float32)], axis=1)


def hybrid_layout(space: gym.Space) -> HybridLayout | None:
    """The layout of a hybrid action space (module docstring); None for any other space."""
    if not (isinstance(space, gym.spaces.Tuple) and len(space.spaces) == 2):
        return None
    box, multi = space.spaces
    if not (isinstance(box, gym.spaces.Box) and len(box.shape) == 1 and np.dtype(box.dtype).kind == "f"
            and isinstance(multi, gym.spaces.MultiDiscrete) and len(multi.nvec.shape) == 1):
        return None
    return HybridLayout(int(box.shape[0]), tuple(int(n) for n in multi.nvec))
