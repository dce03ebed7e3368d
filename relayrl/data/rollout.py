"""On-policy rollout storage: preallocated [T, N] arrays filled one vector step at a time."""

from __future__ import annotations

import numpy as np

from relayrl.data.dtypes import stored_dtype
from relayrl.types import Batch


class RolloutStore:
    """Holds one rollout of ``num_steps`` vector steps for ``num_envs`` envs.

    ``next_value[t]`` starts as the value of the following step (filled by ``finish``) and is
    overwritten by ``bootstrap`` with V(final observation) for envs truncated at step t. With
    ``hidden_size`` > 0 (a recurrent policy), ``hidden[t]`` is the policy's state before it acted at
    step t: a sequence cut out of the rollout at any step starts from it (data/sequences.py).
    Observations are kept in the stored dtype of ``obs_dtype`` (data/dtypes.py: uint8 stays uint8,
    float64 becomes float32); the policy says which dtype its ``PolicyOutput.obs`` has.
    ``action_mask[t]`` ([T, N, width] bool, True = allowed) is the mask the policy acted under at step t,
    so the loss uses the distribution the action was sampled from; the column exists once an ``add``
    brings a mask (envs that give masks give them from their reset on: earlier rows allow everything).
    """

    def __init__(self, num_steps: int, num_envs: int, obs_shape: tuple[int, ...],
                 action_shape: tuple[int, ...], action_dtype: np.dtype, hidden_size: int = 0,
                 obs_dtype: np.dtype | type = np.float32):
        self.num_steps, self.num_envs = num_steps, num_envs
        shape = (num_steps, num_envs)
        self.data: Batch = {
            "obs": np.zeros((*shape, *obs_shape), dtype=stored_dtype(obs_dtype)),
            "action": np.zeros((*shape, *action_shape), dtype=action_dtype),
            "logp": np.zeros(shape, dtype=np.float32),
            "value": np.zeros(shape, dtype=np.float32),
            "reward": np.zeros(shape, dtype=np.float32),
            "terminated": np.zeros(shape, dtype=bool),
            "truncated": np.zeros(shape, dtype=bool),
            "next_value": np.zeros(shape, dtype=np.float32),
        }
        if hidden_size:
            self.data["hidden"] = np.zeros((*shape, hidden_size), dtype=np.float32)
        self._bootstrapped = np.zeros(shape, dtype=bool)

    def add(self, t: int, obs: np.ndarray, action: np.ndarray, logp: np.ndarray, value: np.ndarray,
            reward: np.ndarray, terminated: np.ndarray, truncated: np.ndarray,
            hidden: np.ndarray | None = None, action_mask: np.ndarray | None = None,
            cols: slice | None = None) -> None:
        """Step ``t`` of every env, or of the envs ``cols`` only (a group of a double-buffered collector)."""
        d = self.data
        at = t if cols is None else (t, cols)
        if action_mask is not None:
            if "action_mask" not in d:
                d["action_mask"] = np.ones((self.num_steps, self.num_envs, action_mask.shape[-1]), dtype=bool)
            d["action_mask"][at] = action_mask
        elif "action_mask" in d:
            d["action_mask"][at] = True
        d["obs"][at] = obs
        d["action"][at] = action
        d["logp"][at] = logp
        d["value"][at] = value
        d["reward"][at] = reward
        d["terminated"][at] = terminated
        d["truncated"][at] = truncated
        if hidden is not None:
            d["hidden"][at] = hidden
        self._bootstrapped[at] = False

    def bootstrap(self, t: int, env_mask: np.ndarray, final_values: np.ndarray) -> None:
        """Record V(final observation) for the envs in ``env_mask`` (a mask over the envs, or their indices) whose
        episode was truncated at t."""
        self.data["next_value"][t, env_mask] = final_values
        self._bootstrapped[t, env_mask] = True

    def finish(self, last_value: np.ndarray) -> Batch:
        """Fill ``next_value`` for steps that were not bootstrapped and return the [T, N] batch."""
        d = self.data
        following = np.concatenate([d["value"][1:], last_value[None].astype(np.float32)])
        d["next_value"] = np.where(self._bootstrapped, d["next_value"], following)
        return {key: value.copy() for key, value in d.items()}
