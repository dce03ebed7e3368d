"""The dtypes experience is stored in, and the one conversion from stored arrays to the learner's tensors.

Envs observe in many dtypes (Gymnasium's MuJoCo envs float64, image envs uint8); torch learns in
float32. Every path from an env to a network goes through this module, so no algorithm converts on
its own (issue 13):

- **Stored** (rollouts, replay, the transitions workers send): ``stored_dtype`` of the observation's
  dtype. Floating point of any width becomes float32 (the learner's dtype: float64 would double the
  replay's memory for precision no network uses). Integers keep their dtype: uint8 images stay uint8
  from the env to the learner's batch (a quarter of float32's memory, and exact). bool becomes uint8
  0/1 (exact, a quarter of float32's memory: MinAtar's planes); it is never mistaken for pixels,
  because networks take their scale from the observation space (policy/encoders.py: only a uint8
  space's pixels are divided by its upper bound; a bool space's 0/1 reach the network as 0.0/1.0).
  ``store_transitions`` applies this to a batch of transitions on its way into replay, and
  makes the other float columns (reward, discount, continuous actions) float32 too.
- **Learned from**: ``to_tensor(array)``, a float32 tensor with the array's shape. A plain cast:
  uint8 values stay 0..255 (scaling pixels belongs to the network that knows they are pixels). A
  float32 array is not copied (``torch.from_numpy`` shares its memory).
"""

from __future__ import annotations

import numpy as np
import torch

from relayrl.errors import EnvError
from relayrl.types import Batch

FLOAT = np.dtype(np.float32)
OBS_KEYS = ("obs", "next_obs")
FLOAT_KEYS = ("reward", "discount")  # float columns of a transition besides observations and actions


def stored_dtype(dtype: np.dtype | type | str) -> np.dtype:
    """The dtype observations of ``dtype`` are stored in (module docstring)."""
    dtype = np.dtype(dtype)
    if dtype.kind in "iu":
        return dtype
    if dtype.kind == "b":
        return np.dtype(np.uint8)
    if dtype.kind == "f":
        return FLOAT
    raise EnvError(f"observations of dtype {dtype} cannot be learned from: use a Box of floats or integers")


def to_stored(obs: np.ndarray) -> np.ndarray:
    """``obs`` in its stored dtype; the array itself (no copy) when it already is."""
    obs = np.asarray(obs)
    return obs.astype(stored_dtype(obs.dtype), copy=False)


def store_transitions(batch: Batch) -> Batch:
    """A batch of transitions as replay stores it: observations in their stored dtype, reward,
    discount and float actions as float32, every other column (integer actions, flags) as given.
    Columns already in their dtype are passed through without a copy."""
    out = dict(batch)
    for key in OBS_KEYS:
        if key in out:
            out[key] = to_stored(out[key])
    for key in FLOAT_KEYS:
        if key in out:
            out[key] = np.asarray(out[key]).astype(FLOAT, copy=False)
    if "action" in out and np.asarray(out["action"]).dtype.kind == "f":
        out["action"] = np.asarray(out["action"]).astype(FLOAT, copy=False)
    return out


def to_tensor(array: np.ndarray, device: torch.device | None = None) -> torch.Tensor:
    """The learner's float32 tensor of a stored array (observations, rewards, weights...), same shape:
    zero-copy for float32, one cast otherwise (and one copy of a view with negative strides, such as
    ``obs[::-1]``, which torch cannot share). With a ``device`` (the learner's, policy/device.py) the
    array moves there as stored (uint8 images: a quarter of float32's transfer) and is cast on it."""
    array = np.asarray(array)
    if device is not None and device.type != "cpu":
        return torch.from_numpy(np.ascontiguousarray(array)).to(device, non_blocking=True).float()
    if array.dtype != FLOAT:
        array = array.astype(FLOAT)
    elif any(stride < 0 for stride in array.strides):
        array = array.copy()
    return torch.from_numpy(array)
