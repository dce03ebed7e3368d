"""The distributed runtime: rollout workers on a backend (inline, mp, ray) feeding one learner.

``relayrl.runtime.train(config)`` is ``relayrl.training.loop.train`` with the experience coming from
``config.workers`` rollout workers on ``config.backend``; one worker on the inline backend is the
plain local loop. The learner, replay, evaluation, checkpoints and summary are the loop's own.
"""

from __future__ import annotations

from typing import Any

from relayrl.algos import get_algo
from relayrl.config import RunConfig
from relayrl.errors import ConfigError
from relayrl.training.loop import train as train_local


def make_backend(config: RunConfig) -> Any:
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

    algo_cfg = config.algo_config
    if getattr(algo_cfg, "prenorm", False):
        raise ConfigError(f"{config.algo}.prenorm warms the statistics up on the learner's own envs, which "
                          f"rollout workers replace: set {config.algo}.prenorm=false (workers report what they "
                          "see, and the learner merges it), or use one inline worker")
    entry = get_algo(config.algo)
    if not entry.on_policy:
        pool_cls: Any = OffPolicyPool
    else:
        pool_cls = OnPolicyPool if entry.collect_on_request else AsyncOnPolicyPool
    return pool_cls(make_backend(config), config.resolved_backend, max_lag=config.max_policy_lag)


def make_relay_source(config: RunConfig) -> Any:
    """The trainer's end of a relay (``--server``): remote workers instead of local ones.

    On-policy, ``config.workers`` is how many remote workers' rollouts make one learner rollout
    (PPO) or how many column slots their rollouts fill (APPO). With ``net.remote_env`` the env is
    not built here: this connects and takes the spaces from the first worker that describes them."""
    from relayrl.net.trainer import RelaySource

    entry = get_algo(config.algo)
    if config.backend not in ("auto", "inline"):
        raise ConfigError(f"--server learns from the workers connected to the relay, not from --backend "
                          f"{config.backend}: drop --backend (start `relayrl worker --server ...` on each machine)")
    if config.workers != 1 and not entry.on_policy:
        raise ConfigError(f"--server with {config.algo} learns from whatever workers are connected to the relay: drop "
                          "--workers (it counts the remote workers whose rollouts make one rollout of ppo or appo)")
    if getattr(config.algo_config, "prenorm", False):
        raise ConfigError(f"{config.algo}.prenorm warms the statistics up on the trainer's own envs, which remote "
                          f"workers replace: set {config.algo}.prenorm=false (workers report the moments of what "
                          "they see, and the trainer merges them)")
    if config.net.remote_env:
        source = RelaySource(config)
        try:
            source.await_spaces()
        except BaseException:
            source.close()
            raise
        return source
    from relayrl.envs.registry import make

    env = make(config.env.id, **config.env.kwargs)
    try:
        return RelaySource(config, env.observation_space, env.action_space)
    finally:
        env.close()


def train(config: RunConfig, **kwargs: Any) -> dict[str, Any]:
    # (threads=-1 is resolved by the loop, which times the algorithm's own update)
    if config.env.id.startswith("bridge:"):  # an external simulator through shared memory
        from relayrl.bridge.agents import make_bridge_envs

        if config.net.server is not None or config.workers != 1 or config.backend not in ("auto", "inline"):
            raise ConfigError("a bridge simulator trains in this process: drop --server/--workers/--backend "
                              "(one simulator process holds all its agents)")
        return train_local(config, make_envs=make_bridge_envs, **kwargs)
    if config.net.server is not None:
        source = make_relay_source(config)
        try:
            return train_local(config, samples=source, publish=source.publish, **kwargs)
        finally:
            source.close()
    if config.resolved_backend == "inline" and config.workers == 1:
        return train_local(config, **kwargs)
    pool = make_pool(config)
    try:
        return train_local(config, samples=pool, publish=pool.publish, **kwargs)
    finally:
        pool.close()
