"""A recurrent policy's state on agent envs (training/agent_states.py): it follows each agent id across
turns it skips, and an id whose episode ended starts again from zeros; the agent rollout stores the state
each step was acted from, so every trace of the rollout continues its agent's own state."""

from __future__ import annotations

import shlex
import sys

import gymnasium as gym
import numpy as np
import pytest
import torch

from relayrl.algos import get_algo
from relayrl.config import build_config
from relayrl.training.agent_collectors import AgentRolloutCollector
from relayrl.training.agent_states import AgentStates

OBS = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)


def recurrent_policy(kind="gru", obs_space=OBS, act_space=gym.spaces.Discrete(3)):
    torch.manual_seed(0)
    cfg = build_config("ppo", None, [f"ppo.recurrent={kind}", "ppo.recurrent_hidden=8", "ppo.hidden_sizes=[8]"]).ppo
    return get_algo("ppo").build_policy(cfg, obs_space, act_space)


@pytest.mark.parametrize("kind", ["gru", "lstm"])
def test_a_state_follows_its_agent_id_across_skipped_turns_and_resets_at_episode_end(kind):
    """Agents 0, 1, 2 decide in different subsets each turn; agent 0's episode ends after turn 2 and its id
    begins a new one. Each agent's actions and states equal predict(obs, state) run on that agent alone."""
    policy = recurrent_policy(kind)
    rng = np.random.default_rng(0)
    turns = [([0, 1, 2], []), ([2, 0], []), ([1], [0]), ([0, 2], []), ([2, 1, 0], [1]), ([1, 0], [])]  # (ids, ended)
    states = AgentStates(policy, "eval")
    reference: dict[int, np.ndarray | None] = {}  # agent -> its state by predict, None at an episode's start
    for ids, ended in turns:
        for agent in ended:  # reported with this turn: the next decision of the id is a new episode's first
            states.end(np.array([agent]))
            reference[agent] = None
        obs = rng.uniform(-1, 1, (len(ids), 4)).astype(np.float32)
        out, start = states.act(np.array(ids), obs, None)
        for k, agent in enumerate(ids):
            previous = reference.get(agent)
            want_start = np.zeros(policy.state_size, np.float32) if previous is None else previous[0]
            np.testing.assert_allclose(start[k], want_start, atol=1e-6)
            action, reference[agent] = policy.predict(obs[k:k + 1], previous)
            assert out.env_action[k] == action[0]
    assert len(states) == 3
    assert not np.allclose(reference[2], 0)  # the states did move
    states.end(np.array([0, 1, 2]))
    assert len(states) == 0


def test_a_feed_forward_policy_has_no_state():
    cfg = build_config("ppo", None, ["ppo.hidden_sizes=[8]"]).ppo
    policy = get_algo("ppo").build_policy(cfg, OBS, gym.spaces.Discrete(3))
    out, start = AgentStates(policy, "collect").act(np.array([5, 7]), np.zeros((2, 4), np.float32), None)
    assert start is None and out.action.shape == (2,)


MEMORY_CUE = f"{shlex.quote(sys.executable)} -m relayrl.bridge.examples.memory_cue"


def test_the_agent_rollout_stores_each_agent_s_own_state():
    """On the memory_cue simulator (a real process; agents decide in 60% of turns and episodes end every 4
    decisions): each trace of the rollout starts from its agent's state and continues it step by step,
    and every episode's first decision (its step index 0) starts from zeros."""
    from relayrl.bridge.agent_env import BridgeAgents

    env = BridgeAgents(MEMORY_CUE, args=["--agents", "6", "--seed", "3"])
    try:
        policy = recurrent_policy("lstm", env.single_observation_space, env.single_action_space)
        collector = AgentRolloutCollector(env, policy, num_steps=20)
        collector.reset(0)
        for _ in range(2):  # the second rollout begins with the answers the first still owed
            rollout = collector.collect()
            obs, hidden = rollout["obs"][:, 0], rollout["hidden"][:, 0]
            done = (rollout["terminated"] | rollout["truncated"])[:, 0]
            assert hidden.shape == (len(obs), policy.state_size)
            first = obs[:, -1] == 0  # an episode's first decision
            assert first.sum() >= 6 and np.allclose(hidden[first], 0)
            assert not np.allclose(hidden[~first], 0)
            with torch.no_grad():
                _, _, after = policy.model(torch.from_numpy(obs)[:, None], torch.from_numpy(hidden))
            within = np.flatnonzero(~done[:-1])  # row i + 1 is the same agent's next decision
            assert len(within) > len(obs) // 2
            np.testing.assert_allclose(hidden[within + 1], after.numpy()[within], atol=1e-5)
    finally:
        env.close()
