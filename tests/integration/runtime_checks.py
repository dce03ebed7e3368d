"""Checks shared by the runtime integration tests (mp in test_runtime.py, Ray in test_runtime_ray.py)."""

from __future__ import annotations

import numpy as np


class SameWeights:
    """Checks what synchronous on-policy collection means without trusting version stamps: every
    rollout an OnPolicyPool returns was collected with exactly the weights published just before it
    (the log-probabilities the workers stored equal those of the published policy), and not with
    the weights of the version before (``stale_diffs``: shows the check can tell the two apart)."""

    TOLERANCE = 1e-4  # same float32 network, batched differently

    def __init__(self, config):
        import gymnasium as gym

        from relayrl.algos import get_algo

        env = gym.make(config.env.id)
        make = get_algo(config.algo).algo_cls
        self.current, self.previous = (make(config.algo_config, env.observation_space,
                                            env.action_space, 1).policy for _ in range(2))
        env.close()
        self.diffs, self.stale_diffs, self.widths, self.published = [], [], [], 0

    def install(self, monkeypatch):
        from relayrl.runtime.pool import OnPolicyPool

        publish, pull = OnPolicyPool.publish, OnPolicyPool.pull

        def recording_publish(pool, weights, version):
            self.previous.set_weights(self.current.get_weights())
            self.current.set_weights(weights, version)
            self.published += 1
            publish(pool, weights, version)

        def checked_pull(pool):
            rollout, steps = pull(pool)
            self.widths.append(rollout["reward"].shape[1])
            self.diffs.append(self._max_diff(self.current, rollout))
            if self.published > 1:
                self.stale_diffs.append(self._max_diff(self.previous, rollout))
            return rollout, steps

        monkeypatch.setattr(OnPolicyPool, "publish", recording_publish)
        monkeypatch.setattr(OnPolicyPool, "pull", checked_pull)

    @staticmethod
    def _max_diff(policy, rollout):
        import torch

        n = rollout["reward"].size
        obs = torch.from_numpy(rollout["obs"].reshape(n, -1))
        actions = torch.from_numpy(rollout["action"].reshape(n, *rollout["action"].shape[2:]))
        with torch.no_grad():
            logp, _ = policy.model.logp_entropy(obs, actions)
        return float(np.abs(logp.numpy() - rollout["logp"].reshape(n)).max())

    def assert_synchronous(self, columns):
        assert self.diffs and len(self.diffs) == self.published  # one rollout per published version
        assert max(self.diffs) < self.TOLERANCE, max(self.diffs)
        assert set(self.widths) == {columns}  # every worker's chunk in every rollout
        assert self.stale_diffs and np.median(self.stale_diffs) > 100 * self.TOLERANCE, self.stale_diffs

