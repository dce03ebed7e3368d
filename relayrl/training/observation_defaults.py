"""Defaults that fit the observations: an algorithm's image settings when the env gives pictures.

Built-in defaults are tuned on vector tasks (PPO's learning rate of 3e-3 learns CartPole in seconds); on pictures
the settings published image benchmarks use (CleanRL's and SB3's Atari settings) learn better, as
benchmarks/image_defaults.py measures (docs/benchmarks.md, "Defaults by observation kind"). An algorithm's
section declares them in ``AlgoConfig.image_defaults``; ``observation_defaults`` fills in those the user did not
choose when the env's observations hold an image, says so once, and returns the config that config.yaml then
records. Whatever the user set (YAML, ``--set``, the Python API) stays as given; a resumed run's config.yaml sets
everything, so it changes nothing there.

Applied where a run starts (``launch.run``, ``run_trainer``), before workers or envs take the config, for
Gymnasium env ids, whose observation space one env shows. Not for a simulator bridge, PettingZoo envs or a relay
run with ``--remote-env``, whose observations only the other side sees: there, set the values yourself.
"""

from __future__ import annotations

import sys

import gymnasium as gym

from relayrl.algos import get_algo
from relayrl.envs.managers import make_vec
from relayrl.envs.multiagent import is_pettingzoo
from relayrl.options import RunConfig
from relayrl.policy.encoders import holds_image


def observation_space(config: RunConfig) -> gym.Space | None:
    """One env of ``config.env``, made as training makes them, for its observation space; None where this
    process has no env (a bridge simulator, PettingZoo, a relay trainer with ``--remote-env``)."""
    env = config.env
    if env.id.startswith("bridge:") or is_pettingzoo(env.id) or config.net.remote_env:
        return None
    venv = make_vec(env.id, 1, env_kwargs=env.kwargs, max_episode_steps=env.max_episode_steps,
                    wrapping=env.wrapping())
    try:
        return venv.single_observation_space
    finally:
        venv.close()


def observation_defaults(config: RunConfig, quiet: bool = False) -> RunConfig:
    """``config`` with its algorithm's ``image_defaults`` for every option the user left unset, when the env's
    observations hold an image (printed once, unless ``quiet``); else ``config`` itself."""
    cfg = config.algo_config
    unset = {key: value for key, value in cfg.image_defaults.items() if key not in cfg.model_fields_set}
    if not unset:
        return config
    space = observation_space(config)
    if space is None or not holds_image(space):
        return config
    chosen = type(cfg).model_validate({**cfg.model_dump(exclude_unset=True), **unset})
    name = get_algo(config.algo).name
    if not quiet:
        values = ", ".join(f"{name}.{key}={value}" for key, value in unset.items())
        print(f"relayrl: {config.env.id} gives image observations, so {name} takes its image defaults "
              f"({type(cfg).image_source}): {values}. Set any of them to choose your own.", file=sys.stderr)
    return config.model_copy(update={name: chosen})
