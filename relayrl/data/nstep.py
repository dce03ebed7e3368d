"""n-step transitions from per-step transitions of N envs, cut correctly at episode ends.

Each emitted transition carries ``reward`` = Σ_{k<m} γ^k r_{t+k} over the m ≤ n steps it covers,
``next_obs`` = the observation after those m steps (the final observation if the episode ended),
``terminated`` (no bootstrap: the episode really ended) and ``discount`` = γ^m for bootstrapping
otherwise (a truncated episode still bootstraps from its final observation).
"""

from __future__ import annotations

import numbers
from collections import deque

import numpy as np

from relayrl.types import Batch


class NStepAccumulator:
    def __init__(self, n: int, gamma: float, num_envs: int):
        if not isinstance(n, numbers.Integral) or isinstance(n, bool) or n < 1:
            hint = (" (a config's n_step: null is resolved by cfg.n_step_for(agents=...))" if n is None else "")
            raise ValueError(f"n-step needs an integer n >= 1, got {n!r}{hint}")
        self.n, self.gamma = n, gamma
        self.pending: list[deque] = [deque() for _ in range(num_envs)]  # (obs, action, return, steps)

    def push(self, obs: np.ndarray, action: np.ndarray, reward: np.ndarray, next_obs: np.ndarray,
             terminated: np.ndarray, truncated: np.ndarray, next_action_mask: np.ndarray | None = None) -> Batch:
        """One vector step; ``next_obs[i]`` is the final observation where env i's episode ended.
        ``next_action_mask[i]``: the actions allowed at ``next_obs[i]`` (relayrl/envs/masks.py), emitted
        as the transitions' ``next_action_mask`` column. Returns the transitions completed by this step
        (possibly none)."""
        masks = next_action_mask
        out: list[tuple] = []
        for i, queue in enumerate(self.pending):
            r = float(reward[i])
            for item in queue:
                item[2] += self.gamma ** item[3] * r
                item[3] += 1
            queue.append([obs[i], action[i], r, 1])
            if terminated[i] or truncated[i]:
                while queue:
                    o, a, ret, m = queue.popleft()
                    out.append((o, a, ret, next_obs[i], bool(terminated[i]), self.gamma ** m, i))
            elif len(queue) == self.n:
                o, a, ret, m = queue.popleft()
                out.append((o, a, ret, next_obs[i], False, self.gamma ** m, i))
        if not out:
            return {}
        o, a, ret, nxt, term, disc, env = zip(*out)
        batch = {"obs": np.stack(o), "action": np.stack(a), "reward": np.array(ret, np.float32),
                 "next_obs": np.stack(nxt), "terminated": np.array(term), "discount": np.array(disc, np.float32)}
        if masks is not None:
            batch["next_action_mask"] = masks[list(env)]
        return batch
