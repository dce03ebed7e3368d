"""APPO: PPO's clipped surrogate on chunks from rollout workers that lag the learner, with V-trace
targets (IMPALA) correcting for the lag. Workers never wait for the learner (``--workers N``):
each chunk is learned from as soon as it arrives, whatever version collected it.

The network, the policy and the update are PPO's (``algos/ppo.py``); APPO changes only the
advantages and value targets: V-trace with the learner's current critic and the ratio of the
current policy to the behaviour policy that collected the chunk. Bootstrap values at a chunk's end
and at truncations come from the worker's critic (their observations are not in the chunk).
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np
import torch
from pydantic import Field

from relayrl.algos.registry import register
from relayrl.algos.ppo import PPO, PPOConfig, PPOPolicy
from relayrl.data.vtrace import compute_vtrace
from relayrl.types import COLUMN, Batch


class APPOConfig(PPOConfig):
    lag_correction: ClassVar[str | None] = "V-trace"
    epochs: int = Field(2, ge=1)
    """Passes over each chunk (few: later chunks bring fresher data)."""
    vtrace_rho_clip: float = Field(1.0, gt=0.0)
    """ρ̄: clip of the importance ratio in the TD errors and the policy-gradient advantage."""
    vtrace_c_clip: float = Field(1.0, gt=0.0)
    """c̄: clip of the trace coefficients (how far back a correction reaches)."""


def column_repeats(columns: np.ndarray) -> np.ndarray:
    """For each rollout column, how many times its env column appeared before it (0: first)."""
    repeats = np.zeros(len(columns), dtype=np.int64)
    seen: dict[int, int] = {}
    for i, column in enumerate(columns.tolist()):
        repeats[i] = seen.get(column, 0)
        seen[column] = repeats[i] + 1
    return repeats


class APPO(PPO):
    def scale_rewards(self, rollout: Batch) -> np.ndarray:
        """PPO's reward scaling, each env's chunks one after the other. A rollout of chunks that
        arrived together holds an env column twice when its worker delivered two chunks (in the
        order it collected them: relayrl.types.COLUMN); taken together, both would start from the
        same running return and only the last would be kept."""
        if COLUMN not in rollout or self.ret_rms is None:
            return super().scale_rewards(rollout)
        repeats = column_repeats(rollout[COLUMN][0])
        # as many parts on every learner (each part's scaling pools the statistics: learners/moments.py)
        parts = self.learners.max_(int(repeats.max()) + 1 if len(repeats) else 1)
        if parts == 1:
            return super().scale_rewards(rollout)
        shape = rollout["reward"].shape
        rewards = np.empty(shape, dtype=np.float32)
        for r in range(parts):  # (a learner with fewer repeats scales empty parts)
            idx = np.flatnonzero(repeats == r)
            part = {k: v[:, idx] for k, v in rollout.items() if isinstance(v, np.ndarray) and v.shape[:2] == shape}
            rewards[:, idx] = super().scale_rewards(part)
        return rewards

    @torch.no_grad()
    def targets(self, rollout: Batch, rewards: np.ndarray, steps: dict[str, torch.Tensor]
                ) -> tuple[np.ndarray, np.ndarray]:
        """V-trace from the current networks, run on the learner's device over ``steps`` (``device_steps``)."""
        cfg, model = self.cfg, self.policy.model
        T, N = rewards.shape
        n = T * N
        obs = steps["obs"].reshape(n, *steps["obs"].shape[2:])
        actions = steps["action"].reshape(n, *steps["action"].shape[2:])
        mask = steps.get("action_mask")
        mask = None if mask is None else mask.reshape(n, -1)
        out, values = model.actor_critic(obs)
        logp, _ = self.policy.logp_entropy(out, actions, mask)
        values = values.cpu().numpy().reshape(T, N)
        log_rhos = logp.cpu().numpy().reshape(T, N) - rollout["logp"]
        done = rollout["terminated"] | rollout["truncated"]
        next_values = np.array(rollout["next_value"], dtype=np.float32)
        next_values[:-1] = np.where(done[:-1], next_values[:-1], values[1:])  # current critic where we can
        return compute_vtrace(rewards, values, next_values, log_rhos, rollout["terminated"], rollout["truncated"],
                              cfg.gamma, cfg.gae_lambda, cfg.vtrace_rho_clip, cfg.vtrace_c_clip)


register("appo", APPOConfig, APPO, PPOPolicy, on_policy=True, asynchronous=True)
