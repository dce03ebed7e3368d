"""Collectors for agent envs (agents that decide when they need to): a scripted env, a policy whose
value is its observation, and checks on every row the algorithms will learn from."""

from __future__ import annotations

import numpy as np
import pytest

from relayrl.data.gae import compute_gae
from relayrl.errors import ConfigError
from relayrl.envs.agents import AgentEnv, AgentTurn
from relayrl.training.agent_collectors import AgentEpisodes, AgentEvaluator, AgentRolloutCollector, AgentTransitionCollector
from relayrl.core import Policy
from relayrl.types import PolicyOutput


def obs_of(agent: int, t: int, final: bool = False) -> list[float]:
    return [agent * 100 + t + (0.5 if final else 0.0)]


class ScriptedAgents(AgentEnv):
    """Agent 0 decides every turn (reward 1); agent 1 every second turn (reward 10 since its last
    decision); agent 2 every turn (reward 0.5), its episode terminates at turn 3 (reward -5) and is
    interrupted at turn 5 (reward 2), each time starting the next episode in the same turn."""

    num_envs = 3

    def __init__(self):
        self.t, self.actions = 0, []

    def turn(self) -> AgentTurn:
        t = self.t
        deciders = [a for a in (0, 1, 2) if a != 1 or t % 2 == 0]
        rewards = {0: 1.0, 1: 10.0, 2: 0.5}
        ends = []
        if t == 3:
            ends = [(2, -5.0, False)]
        if t == 5:
            ends = [(2, 2.0, True)]
        return AgentTurn(
            ids=np.array(deciders, np.int64), obs=np.array([obs_of(a, t) for a in deciders], np.float32),
            reward=np.array([0.0 if t == 0 or any(e[0] == a for e in ends) else rewards[a] for a in deciders],
                            np.float32),
            end_ids=np.array([e[0] for e in ends], np.int64),
            end_obs=np.array([obs_of(e[0], t, final=True) for e in ends], np.float32).reshape(-1, 1),
            end_reward=np.array([e[1] for e in ends], np.float32), interrupted=np.array([e[2] for e in ends], bool))

    def reset(self, seed=None) -> AgentTurn:
        self.t = 0
        return self.turn()

    def step(self, actions) -> AgentTurn:
        self.actions.append(np.asarray(actions))
        self.t += 1
        return self.turn()


class ValuePolicy(Policy):
    """value(obs) = obs[:, 0]; actions are the observation too, so rows can be traced."""

    action_shape, action_dtype = (1,), np.dtype(np.float32)

    def act(self, obs, mode="collect"):
        obs = np.asarray(obs, np.float32)
        return PolicyOutput(action=obs.copy(), env_action=obs.copy(), logp=np.zeros(len(obs), np.float32),
                            value=obs[:, 0].copy(), obs=obs)

    def value(self, obs, rows=None):
        return np.asarray(obs, np.float32)[:, 0].copy()

    def get_weights(self):
        return {}

    def set_weights(self, weights, version=None):
        pass


def rows_of(batch, agent: int) -> dict:
    mask = (batch["obs"][:, 0, 0] // 100).astype(int) == agent
    return {k: v[mask, 0] for k, v in batch.items()}


def test_rollout_rows_per_agent_with_ends_cuts_and_carried_steps():
    env, policy = ScriptedAgents(), ValuePolicy()
    collector = AgentRolloutCollector(env, policy, num_steps=5)
    collector.reset(0)
    batch = collector.collect()  # acts at turns 0..4, answers seen up to turn 5
    assert all(v.shape[1] == 1 for v in batch.values())

    a = rows_of(batch, 0)  # acted 0..4, each answered next turn with 1
    np.testing.assert_array_equal(a["obs"][:, 0], [0, 1, 2, 3, 4])
    np.testing.assert_array_equal(a["reward"], [1] * 5)
    np.testing.assert_array_equal(a["next_value"], [1, 2, 3, 4, 5])  # the last: V(obs at turn 5)
    np.testing.assert_array_equal(a["truncated"], [0, 0, 0, 0, 1])  # cut at the rollout's end
    assert not a["terminated"].any()

    b = rows_of(batch, 1)  # acted at 0, 2, 4; the act at 4 is unanswered and carried over
    np.testing.assert_array_equal(b["obs"][:, 0], [100, 102])
    np.testing.assert_array_equal(b["reward"], [10, 10])
    np.testing.assert_array_equal(b["next_value"], [102, 104])
    np.testing.assert_array_equal(b["truncated"], [0, 1])  # its successor (turn 4) is not in this rollout

    c = rows_of(batch, 2)  # acted 0..4: turn 2's act ends terminated at 3, turn 4's interrupted at 5
    np.testing.assert_array_equal(c["obs"][:, 0], [200, 201, 202, 203, 204])
    np.testing.assert_array_equal(c["reward"], [0.5, 0.5, -5, 0.5, 2])
    np.testing.assert_array_equal(c["terminated"], [0, 0, 1, 0, 0])
    np.testing.assert_array_equal(c["truncated"], [0, 0, 0, 0, 1])
    assert c["next_value"][0] == 201 and c["next_value"][3] == 204
    assert c["next_value"][4] == 205.5  # V(final observation) bootstraps the interrupted episode

    # GAE over the single column equals GAE over each agent's own trajectory
    adv, _ = compute_gae(batch["reward"], batch["value"], batch["next_value"], batch["terminated"],
                         batch["truncated"], gamma=0.9, lam=0.8)
    mask = (batch["obs"][:, 0, 0] // 100).astype(int) == 1
    delta = b["reward"] + 0.9 * b["next_value"] - b["obs"][:, 0]
    np.testing.assert_allclose(adv[mask, 0], [delta[0] + 0.9 * 0.8 * delta[1], delta[1]], rtol=1e-6)

    second = collector.collect()  # agent 1's carried act (turn 4) is answered at turn 6
    b2 = rows_of(second, 1)
    np.testing.assert_array_equal(b2["obs"][:, 0], [104, 106, 108])
    np.testing.assert_array_equal(b2["next_value"][:1], [106])
    assert len(env.actions) == 10 and len(env.actions[0]) == 3 and len(env.actions[1]) == 2


def test_episode_returns_and_lengths_start_over_after_an_end():
    env = ScriptedAgents()
    episodes = AgentEpisodes()
    turn = env.reset()
    for _ in range(5):
        acted = set(turn.ids.tolist())
        turn = env.step(np.zeros((len(turn.ids), 1)))
        episodes.track(turn, acted)
    returns, lengths = episodes.pop()
    # agent 2: acts at 0, 1, 2 -> 0.5, 0.5, then -5 at the end (turn 3); then 3, 4 -> 0.5, then 2 at turn 5
    assert returns == [-4.0, 2.5] and lengths == [3, 2]


def test_one_step_transitions_for_off_policy_learners():
    env, policy = ScriptedAgents(), ValuePolicy()
    source = AgentTransitionCollector(env, policy, gamma=0.9, turns_per_pull=5)
    source.reset(0)
    batch, steps = source.pull()
    assert steps == len(batch["reward"]) == 5 + 2 + 5
    ended = batch["obs"][:, 0] == 202
    assert batch["terminated"][ended].all() and batch["reward"][ended] == -5
    np.testing.assert_array_equal(batch["next_obs"][ended, 0], [203.5])
    cut = batch["obs"][:, 0] == 204  # interrupted: not terminal, next obs is the final one
    assert not batch["terminated"][cut].any() and batch["next_obs"][cut, 0] == 205.5
    b = batch["obs"][:, 0] // 100 == 1
    np.testing.assert_array_equal(batch["next_obs"][b, 0], [102, 104])
    assert (batch["discount"] == np.float32(0.9)).all()
    with pytest.raises(ConfigError, match="n_step=1"):
        AgentTransitionCollector(env, policy, 0.9, 5, n_step=3)


class Periodic(ScriptedAgents):
    """Agent a's episodes last a + 2 steps, reward 1 per step; all decide every turn."""

    def turn(self) -> AgentTurn:
        t, agents = self.t, [0, 1, 2]
        ends = [a for a in agents if t > 0 and t % (a + 2) == 0]
        return AgentTurn(ids=np.array(agents), obs=np.array([obs_of(a, t) for a in agents], np.float32),
                         reward=np.array([0.0 if a in ends or t == 0 else 1.0 for a in agents], np.float32),
                         end_ids=np.array(ends, np.int64), end_obs=np.array([obs_of(a, t) for a in ends],
                                                                           np.float32).reshape(-1, 1),
                         end_reward=np.ones(len(ends), np.float32), interrupted=np.zeros(len(ends), bool))


def test_the_evaluator_keeps_a_quota_per_agent(monkeypatch):
    policy = ValuePolicy()
    result = AgentEvaluator(Periodic(), episodes=3, seed=0).evaluate(policy)
    assert sorted(result.lengths.tolist()) == [2, 3, 4] and sorted(result.returns.tolist()) == [2, 3, 4]
    result = AgentEvaluator(Periodic(), episodes=4, seed=0).evaluate(policy)  # agent 0 gives two
    assert sorted(result.lengths.tolist()) == [2, 2, 3, 4]
    monkeypatch.setattr("relayrl.training.agent_collectors.MAX_EVAL_TURNS", 50)
    with pytest.raises(Exception, match="did not finish 1 episodes in 50 turns"):
        AgentEvaluator(ScriptedAgents(), episodes=1, seed=0).evaluate(policy)  # agent 0 never ends


def test_n_step_null_means_one_step_on_agent_envs_and_the_algorithms_default_on_vector_envs():
    from relayrl.config import build_config

    dqn = build_config("dqn").dqn
    assert dqn.n_step is None and (dqn.n_step_for(agents=True), dqn.n_step_for(agents=False)) == (1, 3)
    sac = build_config("sac").sac
    assert (sac.n_step_for(agents=True), sac.n_step_for(agents=False)) == (1, 1)
    explicit = build_config("dqn", None, ["dqn.n_step=5"]).dqn
    assert (explicit.n_step_for(agents=True), explicit.n_step_for(agents=False)) == (5, 5)  # then refused on agents
