"""Weights as flat arrays, and the per-node weight board workers read them from.

``flatten(policy.get_weights())`` turns the nested dict of tensors, arrays and numbers into named
numpy arrays (``unflatten`` restores the structure); the same architecture always gives the same
names, shapes and dtypes, so a worker knows the layout from its own policy.

``WeightBoard`` is the WorkerProxy's fan-out on one machine: one shared-memory copy of the latest
weights that every local worker reads, so a broadcast is one write per node whatever the number
of workers; its version never goes down (a write older than what it holds is ignored). Writers and
readers never block each other: a sequence counter is odd while a write is in progress, and a
reader whose copy overlapped a write (counter odd or changed) retries. (x86 keeps stores in order
and loads in order, which this relies on; numpy gives no fences.)
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import torch

from relayrl.envs.shm import AttachedArrays, Layout, SharedArrays

Flat = dict[str, np.ndarray]
SEP = "/"


def flatten(tree: dict[str, Any], prefix: str = "") -> tuple[Flat, dict[str, str]]:
    """Named arrays and, per name, the kind to restore (tensor, array or float/int)."""
    arrays: Flat = {}
    kinds: dict[str, str] = {}
    for key, value in tree.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            sub, sub_kinds = flatten(value, name + SEP)
            arrays.update(sub)
            kinds.update(sub_kinds)
        elif isinstance(value, torch.Tensor):
            arrays[name], kinds[name] = value.detach().cpu().numpy(), "tensor"
        elif isinstance(value, np.ndarray):
            arrays[name], kinds[name] = value, "array"
        elif isinstance(value, (bool, int, float, np.number)):
            arrays[name] = np.asarray(value)
            kinds[name] = "int" if isinstance(value, (bool, int, np.integer)) else "float"
        else:
            raise TypeError(f"cannot broadcast weight {name!r} of type {type(value).__name__}")
    return arrays, kinds


def unflatten(arrays: Flat, kinds: dict[str, str]) -> dict[str, Any]:
    tree: dict[str, Any] = {}
    for name, value in arrays.items():
        *parents, leaf = name.split(SEP)
        node = tree
        for part in parents:
            node = node.setdefault(part, {})
        kind = kinds[name]
        if kind == "tensor":
            node[leaf] = torch.from_numpy(np.array(value))
        elif kind == "array":
            node[leaf] = np.array(value)
        else:
            scalar = np.asarray(value).reshape(-1)[0]  # some formats store a scalar as shape [1]
            node[leaf] = int(scalar) if kind == "int" else float(scalar)
    return tree


HEADER = "__header__"  # [sequence, version, env_steps]


def board_layout(template: Flat) -> Layout:
    return [(HEADER, (3,), np.dtype(np.int64))] + [(k, v.shape, v.dtype) for k, v in template.items()]


class WeightBoard:
    """The latest weights of one run in shared memory. The learner side creates it; workers attach
    with ``WeightBoard.attach(name, layout)``."""

    def __init__(self, arrays: dict[str, np.ndarray], owner: SharedArrays | AttachedArrays):
        self.arrays, self._owner = arrays, owner
        self.header = arrays[HEADER]

    @classmethod
    def create(cls, template: Flat) -> "WeightBoard":
        shared = SharedArrays(board_layout(template))
        shared.arrays[HEADER][:] = (0, -1, 0)  # version -1: nothing published yet
        return cls(shared.arrays, shared)

    @classmethod
    def attach(cls, name: str, layout: Layout) -> "WeightBoard":
        attached = AttachedArrays(name, layout)
        return cls(attached.arrays, attached)

    @property
    def name(self) -> str:
        return self._owner.name  # type: ignore[union-attr]

    @property
    def version(self) -> int:
        return int(self.header[1])

    def write(self, weights: Flat, version: int, env_steps: int) -> bool:
        """Publish ``weights`` unless the board already holds a newer version (publishes that reach
        a node out of order, e.g. two concurrent calls on a Ray node proxy): False when ignored."""
        header = self.header
        if version < int(header[1]):
            return False
        header[0] += 1  # odd: writing
        for key, value in weights.items():
            self.arrays[key][...] = value
        header[1], header[2] = version, env_steps
        header[0] += 1  # even: consistent
        return True

    def read(self, timeout: float = 5.0) -> tuple[Flat, int, int]:
        """A consistent copy: (weights, version, env_steps)."""
        header, deadline = self.header, time.monotonic() + timeout
        while True:
            before = int(header[0])
            if before % 2 == 0:
                copy = {k: v.copy() for k, v in self.arrays.items() if k != HEADER}
                version, env_steps = int(header[1]), int(header[2])
                if int(header[0]) == before:
                    return copy, version, env_steps
            if time.monotonic() > deadline:
                raise TimeoutError("the weight board stayed mid-write: its writer died while publishing")
            time.sleep(1e-4)

    def close(self) -> None:
        self._owner.close()
