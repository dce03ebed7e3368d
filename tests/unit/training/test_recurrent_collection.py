"""Hidden states through collection and evaluation: stored per step, reset where episodes end (autoreset
inside a rollout), carried across rollouts, and used for the truncation bootstrap."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import torch

from relayrl.algos.ppo import PPOPolicy
from relayrl.config import build_config
from relayrl.envs import make_vec
from relayrl.training.collector import OnPolicyCollector
from relayrl.training.evaluator import Evaluator
from relayrl.core import Policy
from relayrl.types import PolicyOutput


def recurrent_policy(kind="lstm"):
    cfg = build_config("ppo", None, [f"ppo.recurrent={kind}", "ppo.recurrent_hidden=8", "ppo.hidden_sizes=[8]"]).ppo
    torch.manual_seed(0)
    return PPOPolicy(gym.spaces.Box(-np.inf, np.inf, (4,), np.float32), gym.spaces.Discrete(2), cfg)


def test_states_reset_at_episode_starts_and_carry_across_rollouts():
    policy = recurrent_policy()
    venv = make_vec("CartPole-v1", num_envs=2, seed=0, max_episode_steps=5)  # autoresets every 5 steps
    results = []
    step = venv.step
    venv.step = lambda action: results.append(step(action)) or results[-1]
    collector = OnPolicyCollector(venv, policy, num_steps=12)
    collector.reset(seed=0)
    with venv:
        first, second = collector.collect(), collector.collect()
    obs = np.concatenate([first["obs"], second["obs"]])
    hidden = np.concatenate([first["hidden"], second["hidden"]])
    done = np.concatenate([first["terminated"] | first["truncated"], second["terminated"] | second["truncated"]])
    assert hidden.shape == (24, 2, policy.state_size) and done[:12].sum() >= 4

    # replay the model step by step from zeros, resetting where episodes end: the states must match
    model, state = policy.model, policy.model.initial_state(2)
    with torch.no_grad():
        for t in range(24):
            np.testing.assert_allclose(hidden[t], state.numpy(), atol=1e-6, err_msg=f"step {t}")
            after = model(torch.from_numpy(obs[t])[:, None], state)[2]
            if results[t].truncated.any():  # V(final obs) continues the episode's state
                rows = results[t].truncated & ~results[t].terminated
                final = torch.from_numpy(results[t].final_obs[rows])[:, None]
                bootstrap = model(final, after[torch.from_numpy(rows)])[1][:, 0].numpy()
                rollout = first if t < 12 else second
                np.testing.assert_allclose(rollout["next_value"][t % 12, rows], bootstrap, rtol=1e-5, atol=1e-6)
            state = after.masked_fill(torch.from_numpy(done[t])[:, None], 0.0)

    starts = np.zeros((24, 2), bool)
    starts[0] = True
    starts[1:] = done[:-1]
    assert not hidden[starts].any()  # every episode starts from zeros (autoreset inside the rollout)...
    assert (np.abs(hidden[~starts]).sum(-1) > 0).all()  # ...and nowhere else
    assert not done[11].any() and np.abs(second["hidden"][0]).sum() > 0  # carried into the next rollout
    # the carried state is the policy's, and the rollout's last value bootstraps from it
    torch.testing.assert_close(policy.hidden("collect", 2), state)
    with torch.no_grad():
        expected = model(torch.from_numpy(results[-1].obs)[:, None], state)[1][:, 0].numpy()
    live = ~done[-1]
    np.testing.assert_allclose(second["next_value"][-1, live], expected[live], rtol=1e-5, atol=1e-6)


def test_feed_forward_rollouts_have_no_hidden_array():
    cfg = build_config("ppo", None, []).ppo
    policy = PPOPolicy(gym.spaces.Box(-np.inf, np.inf, (4,), np.float32), gym.spaces.Discrete(2), cfg)
    with make_vec("CartPole-v1", num_envs=2, seed=0) as venv:
        collector = OnPolicyCollector(venv, policy, num_steps=4)
        collector.reset(seed=0)
        assert "hidden" not in collector.collect()


class RecordingPolicy(Policy):
    """A recurrent policy's interface, recording what the evaluator asks of it."""

    recurrent = True

    def __init__(self):
        self.calls: list = []

    def act(self, obs, mode):
        self.calls.append(("act", mode, len(obs)))
        action = np.zeros(len(obs), np.int64)
        return PolicyOutput(action=action, env_action=action)

    def reset_hidden(self, mode, done=None):
        self.calls.append(("reset", mode, None if done is None else done.tolist()))

    def get_weights(self):
        return {}

    def set_weights(self, weights, version=None):
        pass


def test_evaluation_resets_states_at_its_start_and_where_episodes_end():
    policy = RecordingPolicy()
    with make_vec("CartPole-v1", num_envs=2, seed=0, max_episode_steps=4) as venv:
        results = []
        step = venv.step
        venv.step = lambda action: results.append(step(action)) or results[-1]
        result = Evaluator(venv, episodes=4, seed=0).evaluate(policy)
    done = [r.done.copy() for r in results]
    assert len(result.returns) == 4 and sum(d.any() for d in done) >= 2  # 4 episodes on 2 envs: resets happen
    # every state is reset before the first action; after each step, exactly the envs whose episode ended
    # are reset, before the next action; nothing else is reset
    expected = [("reset", "eval", None)]
    for d in done:
        expected.append(("act", "eval", 2))
        if d.any():
            expected.append(("reset", "eval", d.tolist()))
    assert policy.calls == expected
