import copy

import gymnasium as gym
import numpy as np
import pytest
import torch

from relayrl.algos.td3 import TD3
from relayrl.cli import main
from relayrl.config import build_config
from relayrl.errors import EnvError

OBS = gym.spaces.Box(-5, 5, (3,), np.float32)
ACT = gym.spaces.Box(np.array([-2.0, 0.0], np.float32), np.array([2.0, 1.0], np.float32))


def make(*sets):
    torch.manual_seed(0)
    return TD3(build_config("td3", None, ["td3.hidden_sizes=[16, 16]", *sets]).td3, OBS, ACT, 1)


def batch(n=32, seed=0):
    rng = np.random.default_rng(seed)
    return {"obs": rng.normal(size=(n, 3)).astype(np.float32), "action": rng.uniform(-1, 1, (n, 2)).astype(np.float32),
            "reward": rng.normal(size=n).astype(np.float32), "next_obs": rng.normal(size=(n, 3)).astype(np.float32),
            "terminated": rng.random(n) < 0.2, "discount": np.full(n, 0.99, np.float32)}


def test_collect_adds_gaussian_noise_to_the_deterministic_eval_action_within_the_bounds():
    algo = make("td3.start_training=0", "td3.exploration_noise=0.1")
    obs = np.random.default_rng(0).normal(size=(4000, 3)).astype(np.float32)
    evaluated = algo.policy.act(obs, "eval")
    np.testing.assert_array_equal(evaluated.action, algo.policy.act(obs, "eval").action)
    collected = algo.policy.act(obs, "collect")
    assert collected.action.min() >= -1 and collected.action.max() <= 1
    assert (collected.env_action >= ACT.low).all() and (collected.env_action <= ACT.high).all()
    np.testing.assert_allclose(collected.env_action, ACT.low + (collected.action + 1) * (ACT.high - ACT.low) / 2,
                               rtol=1e-6)
    inside = np.abs(evaluated.action) < 0.6  # (where clipping at +-1 cannot touch the noise)
    noise = (collected.action - evaluated.action)[inside]
    assert abs(noise.mean()) < 0.01 and 0.09 < noise.std() < 0.11
    quiet = make("td3.start_training=0", "td3.exploration_noise=0")
    np.testing.assert_array_equal(quiet.policy.act(obs, "collect").action, quiet.policy.act(obs, "eval").action)


def test_random_actions_until_training_starts():
    algo = make("td3.start_training=100")
    algo.set_progress(0, 1000)
    assert algo.policy.random_actions
    algo.set_progress(100, 1000)
    assert not algo.policy.random_actions


def expected_critic_loss(algo, b, noise):
    """sum over the twins of mean (Q_i(s, a) - y)^2, y with the target actor's action plus ``noise``."""
    obs, next_obs, action = (torch.from_numpy(b[k]) for k in ("obs", "next_obs", "action"))
    with torch.no_grad():
        next_action = (algo.target_actor(next_obs) + noise).clamp(-1, 1)
        next_q = algo.target(next_obs, next_action).min(0).values
        y = torch.from_numpy(b["reward"]) + 0.99 * (1 - torch.from_numpy(b["terminated"]).float()) * next_q
        return (algo.critic(obs, action) - y).pow(2).sum(0).mean().item()


def test_the_critic_target_is_the_min_of_the_twin_targets_at_the_smoothed_target_action():
    b = batch()
    plain = make("td3.target_policy_noise=0")
    assert plain.learn(dict(b))["loss/critic"] == pytest.approx(expected_critic_loss(make(), b, 0.0), rel=1e-5)
    # noise far wider than its clip: every draw is clipped to +-noise_clip; a clip of 0 leaves no noise at all
    clipped = make("td3.target_policy_noise=5", "td3.noise_clip=0")
    assert clipped.learn(dict(b))["loss/critic"] == pytest.approx(expected_critic_loss(make(), b, 0.0), rel=1e-5)
    smoothed = make("td3.target_policy_noise=5", "td3.noise_clip=0.5")
    assert smoothed.learn(dict(b))["loss/critic"] != pytest.approx(expected_critic_loss(make(), b, 0.0), rel=1e-3)


def test_actor_and_targets_move_only_every_policy_delay_updates():
    algo = make("td3.policy_delay=3")

    def snapshot():
        return [[p.detach().clone() for p in net.parameters()]
                for net in (algo.policy.actor, algo.critic, algo.target, algo.target_actor)]

    def moved(before):
        return [any(not torch.equal(a, b) for a, b in zip(old, net.parameters()))
                for old, net in zip(before, (algo.policy.actor, algo.critic, algo.target, algo.target_actor))]

    for update in range(1, 7):
        before = snapshot()
        algo.learn(batch(seed=update))
        delayed = update % 3 == 0
        assert moved(before) == [delayed, True, delayed, delayed], update
    assert algo.optim.state[next(algo.policy.actor.parameters())]["step"].item() == 2  # Adam skipped the others
    assert algo.policy.version == 6


def test_state_dict_round_trip_continues_identically():
    algo, clone = make(), make()
    for k in range(3):
        algo.learn(batch(seed=k))
    clone.load_state_dict(copy.deepcopy(algo.state_dict()))  # (as from a file: no tensor shared)
    torch.manual_seed(5)
    algo.learn(batch(seed=9))
    torch.manual_seed(5)
    clone.learn(batch(seed=9))
    for a, b in zip(algo.state_dict()["critic"].values(), clone.state_dict()["critic"].values()):
        torch.testing.assert_close(a, b)
    obs = np.random.default_rng(0).normal(size=(5, 3)).astype(np.float32)
    np.testing.assert_array_equal(algo.policy.act(obs, "eval").action, clone.policy.act(obs, "eval").action)
    assert clone.updates == algo.updates == 4


def test_discrete_actions_and_unbounded_boxes_are_refused():
    cfg = build_config("td3").td3
    with pytest.raises(EnvError, match="TD3 needs a Box"):
        TD3(cfg, OBS, gym.spaces.Discrete(3), 1)
    with pytest.raises(EnvError, match="finite"):
        TD3(cfg, OBS, gym.spaces.Box(-np.inf, np.inf, (2,)), 1)


@pytest.mark.parametrize("algo", ["td3", "redq"])
def test_the_cli_refuses_a_discrete_action_space_with_exit_2_and_writes_nothing(algo, tmp_path, capsys):
    run_dir = tmp_path / "run"
    code = main(["train", algo, "--env", "CartPole-v1", "--total-steps", "100", "--run-dir", str(run_dir)])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert f"{algo.upper()} needs a Box (continuous) action space, got Discrete(2)" in err
    assert not run_dir.exists()
