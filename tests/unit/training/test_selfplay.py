"""The ghost schedule and ratings of self-play (relayrl/training/selfplay.py) on a real policy."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from relayrl.algos import get_algo
from relayrl.config import build_config
from relayrl.envs.agents import AgentTurn
from relayrl.training.selfplay import Ghost, elo_update

OBS, ACT = gym.spaces.Box(-1, 1, (2,), np.float32), gym.spaces.Discrete(3)


def policy():
    return get_algo("ppo").build_policy(build_config("ppo", None, [], {}).algo_config, OBS, ACT)


def ghost(**settings):
    cfg = build_config("ppo", None, [f"selfplay.{k}={v}" for k, v in settings.items()], {}).selfplay
    return Ghost(cfg, policy(), policy(), ["blue", "red"], seed=0)


def ends(*rewards: float) -> AgentTurn:
    n = len(rewards)
    empty = np.zeros((0, 2), np.float32)
    return AgentTurn(ids=np.zeros(0, np.int64), obs=empty, reward=np.zeros(0, np.float32),
                     end_ids=np.arange(n), end_obs=np.zeros((n, 2), np.float32),
                     end_reward=np.array(rewards, np.float32), interrupted=np.zeros(n, bool))


def test_elo_moves_by_k_times_the_surprise():
    assert elo_update(1200, 1200, 1.0) == pytest.approx(1208.0)
    assert elo_update(1200, 1200, 0.5) == pytest.approx(1200.0)
    assert elo_update(1200, 1600, 1.0) == pytest.approx(1200 + 16 * (1 - 1 / 11), rel=1e-6)  # an upset pays more


def test_snapshots_every_save_steps_in_a_window_and_the_side_changes_every_team_change():
    g = ghost(save_steps=100, swap_steps=50, team_change=300, window=3)
    assert len(g.snapshots) == 1 and g.learning == 0  # the initial policy is the first opponent
    changed = [g.advance(64) for _ in range(10)]  # 640 steps
    assert len(g.snapshots) == 3  # 1 + 6 saves, the window keeps the last 3
    assert [k for k, c in enumerate(changed) if c] == [4, 9]  # past 300 and 600 steps
    assert g.learning == 0


def test_the_opponent_is_the_latest_snapshot_or_one_of_the_window():
    g = ghost(save_steps=10, swap_steps=10, team_change=10_000, window=4, play_against_latest_model_ratio=1.0)
    for step in range(5):
        weights = g.policy.get_weights()  # the learning policy changes between snapshots
        g.policy.set_weights({"model": {k: v + 0.01 for k, v in weights["model"].items()}})
        g.advance(10)
        assert g.current is g.snapshots[-1]
    played, latest, learning = (w["model"] for w in (g.opponent.get_weights(), g.snapshots[-1].weights,
                                                     g.policy.get_weights()))
    assert all(torch.equal(played[k], latest[k]) and torch.equal(latest[k], learning[k]) for k in latest)
    assert not all(torch.equal(latest[k], g.snapshots[0].weights["model"][k]) for k in latest)
    g = ghost(save_steps=10, swap_steps=10, team_change=10_000, window=4, play_against_latest_model_ratio=0.0)
    seen = set()
    for _ in range(60):
        g.advance(10)
        seen.add(id(g.current))
    assert len(seen) > 4  # not only the latest: any of the window's


def test_every_finished_game_rates_the_learning_side_against_its_opponent():
    g = ghost()
    opponent = g.current
    g.record(ends(1.0, 1.0, -1.0, 0.0))  # two wins, a loss, a draw
    assert g.elo[0] > 1200 and g.elo[1] == 1200  # only the learning side moves
    assert opponent.elo == pytest.approx(2400 - g.elo[0])  # zero-sum
    stats = g.stats()
    assert stats["selfplay/games"] == 4 and stats["selfplay/win_rate"] == 0.5
    assert stats["selfplay/elo_blue"] == g.elo[0] and stats["selfplay/elo"] == g.elo[0]
    assert "selfplay/win_rate" not in g.stats()  # counted since the last row
