"""The distributed runtime: rollout workers on a backend (inline, mp, ray) feeding one learner.

``make_pool(config)`` is the sample source of ``config.workers`` rollout workers on
``config.backend`` (``pool_for(config, backend)`` the same over any transport, the relay's too); ``relayrl.launch`` hands it to the Trainer, whose learner, replay, evaluation,
checkpoints and summary are the same as for local envs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from relayrl.algos import get_algo
from relayrl.options import RunConfig
from relayrl.runtime.backends import Backend

if TYPE_CHECKING:
    from relayrl.runtime.pool import WorkerPool


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


def pool_for(config: RunConfig, backend: Backend) -> WorkerPool:
    """The pool of ``config.algo``'s kind (off-policy, PPO's synchronous rollouts, APPO's) over ``backend``."""
    from relayrl.runtime.pool import AsyncOnPolicyPool, OffPolicyPool, OnPolicyPool

    entry = get_algo(config.algo)
    if not entry.on_policy:
        pool_cls: type[WorkerPool] = OffPolicyPool
    else:
        pool_cls = OnPolicyPool if entry.collect_on_request else AsyncOnPolicyPool
    return pool_cls(backend, max_lag=config.max_policy_lag)


def make_pool(config: RunConfig) -> WorkerPool:
    """``config.workers`` rollout workers on ``config.backend``, under their pool."""
    config.algo_config.check_placement(config.algo, "workers")  # e.g. PPO's prenorm needs the learner's own envs
    return pool_for(config, make_backend(config))
