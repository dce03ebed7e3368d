"""The on-policy side of the training loop: every round is one [T, N] rollout of the current policy.

When the sample source's collectors hold their own copy of the policy (rollout workers, the relay),
the weights are published before each rollout whose version they have not seen, so every rollout is
collected with the weights just learned (PPO), or at most a few versions behind (APPO's V-trace).
"""

from __future__ import annotations

from typing import Callable

from relayrl.core import Algorithm, SampleSource
from relayrl.training.collector import OnPolicyCollector
from relayrl.training.rounds import LearningStep, Rounds
from relayrl.types import Batch


class OnPolicyRounds(Rounds[Batch]):
    def __init__(self, algo: Algorithm, samples: SampleSource, publish: Callable[[dict, int], None] | None = None):
        """``publish(weights, version)``: where weights go (None: the collectors act with ``algo.policy``)."""
        self.algo, self.samples, self.publish = algo, samples, publish
        self.learning: LearningStep[Batch] = algo  # the algorithm learns from the rollout itself
        self._published = -1

    def gather(self, env_steps: int, updates: int) -> tuple[Batch, int]:
        policy = self.algo.policy
        if self.publish is not None and policy.version != self._published:
            self.publish(policy.get_weights(), policy.version)  # (observation statistics included)
            self._published = policy.version
        rollout, steps = self.samples.pull()
        moments = self.samples.pop_observation_moments()  # what rollout workers saw, for obs_norm
        if moments is not None:
            policy.merge_observation_moments(moments)
        return rollout, steps

    def warmup(self, steps: int, num_envs: int) -> int:
        """PPO's prenorm: fill the policy's observation statistics before learning; returns the env steps taken.

        On the learner's own envs, ``steps`` vector steps of the policy, storing nothing. With rollout workers
        (any backend, the relay too: roadrunner's prenorm across Ray workers), their first rollouts are the
        warm-up: collected with the initial statistics until ``steps`` x ``num_envs`` env steps (what one
        process's warm-up sees, spread over the workers, in whole rollouts) have arrived, their observation
        moments merged (Chan's parallel merge) and the rollouts themselves not learned from; the merged
        statistics then go out as a new version, so every worker's first rollout to learn from uses them."""
        if isinstance(self.samples, OnPolicyCollector):
            return self.samples.warmup(steps)
        policy, target, done = self.algo.policy, steps * num_envs, 0
        saved, policy.update_norm = policy.update_norm, True  # (as on local envs, whatever update_norm says after)
        try:
            while done < target and not self.algo.stopping():
                _, received = self.gather(done, 0)  # (publishes the initial weights first; merges the moments)
                done += received
        finally:
            policy.update_norm = saved
        policy.version += 1  # the statistics changed: the workers' next rollouts wait for them
        return done
