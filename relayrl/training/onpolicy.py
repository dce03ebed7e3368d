"""The on-policy side of the training loop: every round is one [T, N] rollout of the current policy.

When the sample source's collectors hold their own copy of the policy (rollout workers, the relay),
the weights are published before each rollout whose version they have not seen, so every rollout is
collected with the weights just learned (PPO), or at most a few versions behind (APPO's V-trace).
"""

from __future__ import annotations

from typing import Callable

from relayrl.core import Algorithm, SampleSource
from relayrl.errors import ConfigError
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

    def warmup(self, steps: int) -> int:
        """PPO's prenorm: run the policy on the local envs, updating its observation statistics."""
        if not isinstance(self.samples, OnPolicyCollector):
            raise ConfigError("prenorm warms the statistics up on the learner's own envs, which this run does not "
                              "have: set prenorm=false")
        return self.samples.warmup(steps)

