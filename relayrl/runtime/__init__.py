"""The distributed runtime: rollout workers on a backend (inline, mp, ray) feeding one learner.

``make_pool(config)`` is the sample source of ``config.workers`` rollout workers on
``config.backend``; ``relayrl.launch`` hands it to the Trainer, whose learner, replay, evaluation,
checkpoints and summary are the same as for local envs.
"""

from __future__ import annotations

from typing import Any

from relayrl.algos import get_algo
from relayrl.options import RunConfig
from relayrl.runtime.backends import Backend


def make_backend(config: RunConfig) -> Backend:
    name = config.resolved_backend
    if name == "inline":
        from relayrl.runtime.backends.inline import InlineBackend

        return InlineBackend(config, config.workers)
    if name == "mp":
        from relayrl.runtime.backends.mp import MpBackend

        return MpBackend(config, config.workers)
    from relayrl.runtime.backends.ray import RayBackend

    return RayBackend(config, config.workers, address=config.ray_address)


def make_pool(config: RunConfig) -> Any:
    from relayrl.runtime.pool import AsyncOnPolicyPool, OffPolicyPool, OnPolicyPool

    config.algo_config.check_placement(config.algo, "workers")  # e.g. PPO's prenorm needs the learner's own envs
    entry = get_algo(config.algo)
    if not entry.on_policy:
        pool_cls: Any = OffPolicyPool
    else:
        pool_cls = OnPolicyPool if entry.collect_on_request else AsyncOnPolicyPool
    return pool_cls(make_backend(config), max_lag=config.max_policy_lag)
