"""Whole episodes from a vector env and a policy (DI-engine's ``collector.collect(n_episode=N)``).

``record_episodes`` starts every env on a new episode (the caller resets them), then steps them all with the
policy until ``n`` episodes are complete. Env k records its share of the n (n // num_envs, one more for the
first n % num_envs envs), as the evaluator spreads its episodes, so short episodes are not favoured; an env
that has recorded its share keeps stepping unrecorded until the others finish theirs. Every episode runs
from its reset observation to the step that ended it (terminated or truncated).

An episode is a dict of per-step arrays: ``obs`` (the observation acted on, as the env gave it), ``action``
(the policy's action, what ``logp`` is of; the env got its ``env_action``), ``reward``, ``next_obs`` (the
final observation on the last step), ``terminated``, ``truncated``; with ``values``, also ``logp`` and ``value``
(on-policy: what PPO learns from).
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from relayrl.core import Policy
from relayrl.envs.vector import VectorEnv
from relayrl.errors import ConfigError
from relayrl.types import Batch, StepResult

Episode = dict[str, np.ndarray]


def record_episodes(venv: VectorEnv, policy: Policy, n: int, obs: np.ndarray, mask: np.ndarray | None,
                    track: Callable[[StepResult], None], values: bool = False) -> tuple[list[Episode], np.ndarray,
                                                                                        np.ndarray | None]:
    """``n`` whole episodes of ``policy`` acting ("collect" mode) in ``venv`` from ``obs`` (each env's reset
    observation; ``mask``: its action masks), in the order they ended. ``track`` sees every step result (the
    collector's episode statistics). Returns the episodes and the observations and masks the envs are at."""
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise ConfigError(f"collect_episodes({n!r}): ask for a whole number of episodes, at least 1")
    if policy.recurrent:
        raise ConfigError("collect_episodes records feed-forward policies' episodes; a recurrent policy's state "
                          "is not part of them: use collect() with a recurrent policy")
    num_envs = venv.num_envs
    quota = np.full(num_envs, n // num_envs)
    quota[: n % num_envs] += 1
    steps: list[list[Batch]] = [[] for _ in range(num_envs)]  # the steps of each env's episode under way
    episodes: list[Episode] = []
    while quota.any():
        out = policy.act_masked(obs, "collect", mask)
        result = venv.step(out.env_action)
        track(result)
        done = result.terminated | result.truncated
        for k in np.flatnonzero(quota > 0):
            step = {"obs": obs[k], "action": out.action[k], "reward": result.reward[k],
                    "next_obs": result.final_obs[k] if done[k] else result.obs[k],
                    "terminated": result.terminated[k], "truncated": result.truncated[k]}
            if values:
                step["logp"], step["value"] = out.logp[k], out.value[k]
            steps[k].append(step)
            if done[k]:
                episodes.append({key: np.stack([s[key] for s in steps[k]]) for key in steps[k][0]})
                steps[k] = []
                quota[k] -= 1
        obs, mask = result.obs, result.action_mask
    return episodes, obs, mask
