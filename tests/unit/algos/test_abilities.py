"""What generic code asks of an algorithm, the algorithm states itself: its config's placement check, prenorm
steps, warm-up and timing sizes (relayrl.config.AlgoConfig), and learn's replay priorities (Algorithm)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from pydantic import Field

from relayrl.algos import get_algo
from relayrl.config import AlgoConfig, build_config
from relayrl.errors import ConfigError

OBS = gym.spaces.Box(-1, 1, (3,), np.float32)


class PlainConfig(AlgoConfig):  # an algorithm of one's own that states nothing
    num_steps: int = Field(8, ge=1)


@pytest.mark.parametrize("placement, sets, message", [
    ("agents", ["ppo.prenorm=true"], "ppo.prenorm does not apply to agent envs"),
])
def test_ppo_refuses_the_options_that_cannot_work_where_the_experience_comes_from(placement, sets, message):
    cfg = build_config("ppo", None, ["ppo.obs_norm=true", *sets]).ppo
    with pytest.raises(ConfigError, match=message.replace(".", r"\.")):
        cfg.check_placement("ppo", placement)
    for where in ("envs", "workers", "relay"):  # envs the policy steps take both (workers: issue 27's prenorm)
        cfg.check_placement("ppo", where)
    for where in ("agents", "workers", "relay"):
        build_config("ppo", None, []).ppo.check_placement("ppo", where)  # the defaults work anywhere


@pytest.mark.parametrize("algo", ["ppo", "a2c"])
def test_recurrent_policies_run_on_agent_envs(algo):
    """Issue 26 (was refused): the state follows each agent id (training/agent_states.py)."""
    build_config(algo, None, [f"{algo}.recurrent=gru"]).algo_config.check_placement(algo, "agents")


def test_an_algorithm_that_states_nothing_gets_the_defaults():
    cfg = PlainConfig()
    for where in ("envs", "agents", "workers", "relay"):
        cfg.check_placement("plain", where)
    assert cfg.prenorm_steps() == 0 and cfg.transitions_before_learning() == 0
    assert cfg.timing_sizes() == ([256, 256], 256)


def test_the_built_in_configs_state_their_own():
    ppo = build_config("ppo", None, ["ppo.obs_norm=true", "ppo.prenormalize_steps=7", "ppo.hidden_sizes=[8]",
                                     "ppo.batch_size=32"]).ppo
    assert ppo.prenorm_steps() == 0 and ppo.timing_sizes() == ([8], 32)
    assert ppo.model_copy(update={"prenorm": True}).prenorm_steps() == 7
    dqn = build_config("dqn", None, ["dqn.start_training=10", "dqn.batch_size=48", "dqn.hidden_sizes=[16, 4]"]).dqn
    assert dqn.transitions_before_learning() == 48 and dqn.timing_sizes() == ([16, 4], 48)  # a batch first
    sac = build_config("sac", None, ["sac.start_training=500", "sac.batch_size=32"]).sac
    assert sac.transitions_before_learning() == 500 and sac.timing_sizes() == ([64, 64], 32)
    crossq = build_config("crossq", None, ["crossq.critic_hidden_sizes=[48]", "crossq.batch_size=32"]).crossq
    assert crossq.timing_sizes() == ([48], 64)  # the critics' joint batch of (s, a) and (s', a')


@pytest.mark.parametrize("algo", ["dqn", "sac", "td3", "redq", "crossq"])
def test_learn_reports_priorities_once_and_leaves_its_batch_as_given(algo):
    torch.manual_seed(0)
    act = gym.spaces.Discrete(2) if algo == "dqn" else gym.spaces.Box(-1, 1, (1,), np.float32)
    learner = get_algo(algo).algo_cls(getattr(build_config(algo, None, []), algo), OBS, act, 1)
    rng, n = np.random.default_rng(0), 16
    batch = {"obs": rng.normal(size=(n, 3)).astype(np.float32), "next_obs": rng.normal(size=(n, 3)).astype(np.float32),
             "action": rng.integers(0, 2, n) if algo == "dqn" else rng.uniform(-1, 1, (n, 1)).astype(np.float32),
             "reward": np.ones(n, np.float32), "terminated": np.zeros(n, bool), "discount": np.full(n, 0.9, np.float32),
             "weight": np.ones(n, np.float32), "index": np.arange(n)}
    given = {key: value.copy() for key, value in batch.items()}
    assert learner.pop_priorities() is None  # nothing learned yet
    learner.learn(batch)
    assert sorted(batch) == sorted(given) and all(np.array_equal(batch[k], given[k]) for k in given)
    priorities = learner.pop_priorities()
    assert priorities.shape == (n,) and (priorities > 0).all() and np.isfinite(priorities).all()
    assert learner.pop_priorities() is None  # handed over once
