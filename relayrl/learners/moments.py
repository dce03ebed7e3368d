"""Running statistics kept identical across learners, each of which updates its copy from its own data
(PPO's observation statistics and its running-return statistics: policy/normalizer.py's RunningMeanStd).

``PooledMoments(rms).pool(learners)`` folds every learner's updates since the last pool into every copy: one
all-reduce of three sums per learner (count, and the sums of x - m and (x - m)^2 about the mean m all copies
shared at the last pool), which gives the statistics of all the learners' data together, the same on each
(Chan et al.'s pooled moments; the result equals one learner's having seen every learner's data, up to float
rounding). A single learner's pool does nothing.
"""

from __future__ import annotations

import numpy as np
import torch

from relayrl.learners.collective import Collective
from relayrl.policy.normalizer import RunningMeanStd


class PooledMoments:
    """``rms`` (updated in place by its owner) and what every learner's copy held at the last pool."""

    def __init__(self, rms: RunningMeanStd):
        self.rms = rms
        self.mark()

    def mark(self) -> None:
        """The statistics as they are now are the shared starting point (all learners must hold the same: call it
        after the state is loaded or broadcast)."""
        self.count, self.mean, self.var = self.rms.count, self.rms.mean.copy(), self.rms.var.copy()

    def pool(self, learners: Collective) -> None:
        """Every learner's updates since the last pool, in every learner's copy."""
        if learners.size == 1:
            return
        rms, size = self.rms, learners.size
        shift = rms.mean - self.mean
        # this copy's data (the shared start plus its own) about the shared mean: count, sum, sum of squares
        local = np.concatenate([[rms.count], (rms.count * shift).reshape(-1),
                                (rms.count * (rms.var + shift**2)).reshape(-1)])
        total = learners.sum_(torch.from_numpy(local)).numpy()  # (float64, on the CPU: gloo)
        d = self.mean.size
        start_sq = (self.count * self.var).reshape(-1)  # the shared start, counted once by every learner
        count = total[0] - (size - 1) * self.count
        if count == self.count:  # no learner added anything (frozen statistics): they stay as they are, exactly
            return
        first = total[1:1 + d] / count
        second = (total[1 + d:] - (size - 1) * start_sq) / count
        rms.mean = self.mean + first.reshape(self.mean.shape)
        rms.var = np.maximum(second - first**2, 0.0).reshape(self.var.shape)
        rms.count = float(count)
        self.mark()
