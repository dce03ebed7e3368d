"""collect_episodes: N whole episodes from the on- and off-policy collectors (DI-engine's collect(n_episode=N))."""

from functools import partial

import gymnasium as gym
import numpy as np
import pytest

from relayrl.algos import get_algo
from relayrl.config import build_config
from relayrl.envs import make_vec
from relayrl.envs.vector import SyncVectorEnv
from relayrl.errors import ConfigError
from relayrl.training.collector import OffPolicyCollector, OnPolicyCollector


def collector(kind, venv):
    algo_name = "ppo" if kind == "on" else "dqn"
    cfg = getattr(build_config(algo_name), algo_name)
    algo = get_algo(algo_name).algo_cls(cfg, venv.single_observation_space, venv.single_action_space, venv.num_envs)
    if kind == "on":
        return OnPolicyCollector(venv, algo.policy, 16)
    return OffPolicyCollector(venv, algo.policy, 3, 0.99, steps_per_pull=4)


@pytest.mark.parametrize("kind", ["on", "off"])
def test_each_episode_is_whole_from_its_reset_to_its_end_and_the_collector_goes_on(kind):
    with make_vec("CartPole-v1", num_envs=3) as venv:
        c = collector(kind, venv)
        episodes = c.collect_episodes(7, seed=5)
        assert len(episodes) == 7
        firsts = []
        for k in range(3):  # each env's first reset observation, as a fresh env seeded seed + k gives it
            env = gym.make("CartPole-v1")
            firsts.append(env.reset(seed=5 + k)[0])
            env.close()
        starts = [e["obs"][0] for e in episodes]
        for first in firsts:  # every env's first episode is recorded from its reset observation
            assert any(np.array_equal(first, start) for start in starts)
        for e in episodes:
            ended = e["terminated"] | e["truncated"]
            assert ended[-1] and not ended[:-1].any()  # whole: ends on its last step only
            np.testing.assert_array_equal(e["next_obs"][:-1], e["obs"][1:])  # one unbroken trajectory
            if kind == "on":
                assert e["logp"].shape == e["value"].shape == e["reward"].shape
            else:
                assert "logp" not in e
        returns, _ = c.pop_episodes()
        recorded = sorted(float(e["reward"].sum()) for e in episodes)
        assert all(r in returns for r in recorded)  # the collector's episode statistics saw them too
        if kind == "on":
            assert c.collect()["obs"].shape == (16, 3, 4)
        else:
            batch, steps = c.pull()
            assert steps == 12 and len(batch["obs"]) > 0


def test_episodes_are_spread_over_the_envs_so_short_ones_are_not_favoured():
    # env 0's episodes are cut at 3 steps: taking the first 8 episodes to end would take mostly env 0's
    factories = [partial(gym.make, "CartPole-v1", max_episode_steps=3)] + [partial(gym.make, "CartPole-v1")] * 3
    with SyncVectorEnv(factories) as venv:
        episodes = collector("off", venv).collect_episodes(8, seed=0)
    short = [e for e in episodes if len(e["reward"]) == 3 and e["truncated"][-1]]
    assert len(episodes) == 8 and len(short) == 2  # two episodes per env


@pytest.mark.parametrize("bad", [0, -2, 1.5, True])
def test_a_number_of_episodes_that_is_not_a_whole_positive_number_is_refused(bad):
    with make_vec("CartPole-v1", num_envs=2) as venv:
        with pytest.raises(ConfigError, match=r"collect_episodes\(.*\): ask for a whole number of episodes"):
            collector("on", venv).collect_episodes(bad)
