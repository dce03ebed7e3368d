"""APPO: PPO's clipped surrogate on chunks from rollout workers that lag the learner, with V-trace
targets (IMPALA) correcting for the lag. Workers never wait for the learner (``--workers N``):
each chunk is learned from as soon as it arrives, whatever version collected it.

The network, the policy and the update are PPO's (``algos/ppo.py``); APPO changes only the
advantages and value targets: V-trace with the learner's current critic and the ratio of the
current policy to the behaviour policy that collected the chunk. Bootstrap values at a chunk's end
and at truncations come from the worker's critic (their observations are not in the chunk).
"""

from __future__ import annotations

import numpy as np
import torch
from pydantic import Field

from relayrl.algos import register
from relayrl.algos.ppo import PPO, PPOConfig
from relayrl.data.vtrace import compute_vtrace
from relayrl.types import Batch


class APPOConfig(PPOConfig):
    epochs: int = Field(2, ge=1)
    """Passes over each chunk (few: later chunks bring fresher data)."""
    vtrace_rho_clip: float = Field(1.0, gt=0.0)
    """ρ̄: clip of the importance ratio in the TD errors and the policy-gradient advantage."""
    vtrace_c_clip: float = Field(1.0, gt=0.0)
    """c̄: clip of the trace coefficients (how far back a correction reaches)."""


class APPO(PPO):
    @torch.no_grad()
    def targets(self, rollout: Batch, rewards: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        cfg, model = self.cfg, self.policy.model
        steps, width = rewards.shape
        n = steps * width
        obs = torch.from_numpy(rollout["obs"].reshape(n, -1))
        actions = torch.from_numpy(rollout["action"].reshape(n, *rollout["action"].shape[2:]))
        logp, _ = model.logp_entropy(obs, actions)
        values = model.critic(obs).squeeze(-1).numpy().reshape(steps, width)
        log_rhos = logp.numpy().reshape(steps, width) - rollout["logp"]
        done = rollout["terminated"] | rollout["truncated"]
        next_values = np.array(rollout["next_value"], dtype=np.float32)
        next_values[:-1] = np.where(done[:-1], next_values[:-1], values[1:])  # current critic where we can
        return compute_vtrace(rewards, values, next_values, log_rhos, rollout["terminated"], rollout["truncated"],
                              cfg.gamma, cfg.gae_lambda, cfg.vtrace_rho_clip, cfg.vtrace_c_clip)


register("appo", APPOConfig, APPO, on_policy=True, asynchronous=True)
