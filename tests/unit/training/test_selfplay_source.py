"""Self-play's sample source (relayrl/training/selfplay.py's GhostSource) on an in-process two-team race (the
duel example's ``Matches``): only the learning side is collected and counted, the side changes at pull boundaries,
the opponent plays the snapshot the ghost chose; on-policy (PPO) and off-policy (DQN) alike."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from relayrl.algos import get_algo
from relayrl.bridge.examples.duel import BLUE, RED, Matches
from relayrl.config import build_config
from relayrl.envs.agents import AgentTurn, Behaviour, BehaviourEnv
from relayrl.training.selfplay import SelfPlayExperience

SPACE = gym.spaces.Box(-np.inf, np.inf, (2,), np.float32)


class RaceEnv(BehaviourEnv):
    """The duel's matches in process: both runners of every match decide every turn; counts each side's actions."""

    def __init__(self, matches: int = 4):
        self.behaviours = {side: Behaviour(SPACE, gym.spaces.Discrete(3), matches) for side in (BLUE, RED)}
        self.n, self.acted = matches, {BLUE: 0, RED: 0}

    def _turns(self, reward: np.ndarray, ended: np.ndarray, interrupted: np.ndarray, end_obs) -> dict[str, AgentTurn]:
        ids = np.arange(self.n, dtype=np.int64)
        return {side: AgentTurn(ids, self.matches.observe(k), np.where(ended, 0, reward[:, k]).astype(np.float32),
                                ids[ended], end_obs[k], reward[ended, k].astype(np.float32), interrupted[ended])
                for k, side in enumerate((BLUE, RED))}

    def reset(self, seed=None):
        self.matches = Matches(self.n, seed or 0)
        none = np.zeros(self.n, bool)
        return self._turns(np.zeros((self.n, 2), np.float32), none, none, [np.zeros((0, 2), np.float32)] * 2)

    def step(self, actions):
        for side, action in actions.items():
            self.acted[side] += len(action)
        moves = np.stack([np.asarray(actions[side]).reshape(self.n) for side in (BLUE, RED)], axis=1)
        reward, ended, interrupted = self.matches.advance(moves)
        end_obs = [self.matches.observe(k)[ended] for k in range(2)]
        self.matches.restart(ended)
        return self._turns(reward, ended, interrupted, end_obs)


def experience_and_source(algo: str, **selfplay):
    sets = [f"selfplay.{k}={v}" for k, v in selfplay.items()]
    sets.append(f"{algo}.num_steps=10" if algo == "ppo" else f"{algo}.steps_per_iteration=10")
    config = build_config(algo, None, sets, {})
    entry = get_algo(algo)
    make = lambda obs, act: entry.build_policy(config.algo_config, obs, act)  # noqa: E731
    env = RaceEnv()
    experience = SelfPlayExperience(env, RaceEnv(), config.selfplay, make, seed=0)
    policy = make(experience.observation_space, experience.action_space)
    source = experience.source(policy, config.algo_config, entry.on_policy)
    source.reset(0)
    return env, experience, policy, source


@pytest.mark.parametrize("algo", ["ppo", "dqn"])
def test_only_the_learning_side_is_collected_and_counted_and_sides_change_between_pulls(algo):
    env, experience, _, source = experience_and_source(algo, save_steps=40, swap_steps=40, team_change=80)
    learning = []
    for _ in range(8):
        learning.append(source.learner)
        batch, steps = source.pull()
        assert steps == 40 and batch["reward"].size == 40  # 10 turns of the learning side's 4 agents
    assert learning == [BLUE, BLUE, RED, RED, BLUE, BLUE, RED, RED]
    assert env.acted == {BLUE: 320, RED: 320}  # both sides acted every turn, 320 of the 640 actions collected
    assert experience.ghost.steps == 320
    stats = experience.stats()
    assert stats["selfplay/learning_side"] == 0 and "selfplay/elo_blue" in stats and "selfplay/elo_red" in stats


def test_the_opponent_plays_the_snapshot_the_ghost_chose():
    _, experience, policy, source = experience_and_source("ppo", save_steps=80, swap_steps=40, team_change=10_000,
                                                          window=3, play_against_latest_model_ratio=0.0)

    def mark(p) -> float:
        return float(p.get_weights()["model"]["actor.4.bias"][0])

    chosen = set()
    for k in range(1, 13):
        with torch.no_grad():
            policy.model.actor[4].bias[0] = float(k)  # the "learning" between two pulls
        source.pull()
        ghost = experience.ghost
        assert mark(ghost.opponent) == float(ghost.current.weights["model"]["actor.4.bias"][0])
        chosen.add(mark(ghost.opponent))
    kept = [float(s.weights["model"]["actor.4.bias"][0]) for s in experience.ghost.snapshots]
    assert kept == [8.0, 10.0, 12.0]  # a snapshot after every other pull of 40 steps; the last window = 3 kept
    assert len(chosen) > 3  # the opponent moved among the snapshots kept at each swap
