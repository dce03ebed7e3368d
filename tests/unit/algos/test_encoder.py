"""Your own network (``ppo.encoder`` / ``dqn.encoder`` / ``sac.encoder``: "module:function"): the algorithm's heads go
on the encoder's features; bad references and bad modules are one-line ConfigErrors before anything is written; a
checkpoint rebuilds the network from the reference it records."""

from __future__ import annotations

import subprocess
import sys
import uuid

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch import nn

import relayrl
from relayrl.algos import get_algo
from relayrl.config import build_config
from relayrl.errors import CheckpointError, ConfigError

NETS = '''
import numpy as np
from torch import nn

NOT_CALLABLE = 3


def mlp(observation_space, action_space):
    return nn.Sequential(nn.Flatten(), nn.Linear(int(np.prod(observation_space.shape)), 32), nn.LayerNorm(32),
                         nn.Tanh())


def cnn(observation_space, action_space):  # images [n, C, H, W]: fails on flattened observations
    c, h, w = observation_space.shape
    return nn.Sequential(nn.Conv2d(c, 4, 3), nn.ReLU(), nn.Flatten(), nn.Linear(4 * (h - 2) * (w - 2), 16))


def not_a_module(observation_space, action_space):
    return "features"


def three_d(observation_space, action_space):
    return nn.Unflatten(1, (2, 2))  # CartPole [n, 4] -> [n, 2, 2]


def wrong_width(observation_space, action_space):
    return nn.Linear(3, 8)  # CartPole observations have 4 numbers


def not_finite(observation_space, action_space):
    return nn.Sequential(nn.Flatten(), nn.Linear(4, 4), nn.Threshold(1e9, float("nan")))


def no_arguments():
    return nn.Identity()
'''


@pytest.fixture
def nets(tmp_path, monkeypatch):
    """The name of an importable module of encoder factories (unique per test: one test deletes it)."""
    name = f"user_nets_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text(NETS)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield name
    sys.modules.pop(name, None)


CASES = {"ppo": "CartPole-v1", "appo": "CartPole-v1", "dqn": "CartPole-v1", "sac": "Pendulum-v1",
         "td3": "Pendulum-v1", "redq": "Pendulum-v1", "crossq": "Pendulum-v1"}


@pytest.mark.parametrize("algo", list(CASES))
def test_each_algorithm_puts_its_heads_on_the_encoder_and_builds_its_policy_alone_the_same_way(nets, algo):
    torch.manual_seed(0)
    env = gym.make(CASES[algo])
    cfg = getattr(build_config(algo, {algo: {"encoder": f"{nets}:mlp"}}), algo)
    entry = get_algo(algo)
    learner = entry.algo_cls(cfg, env.observation_space, env.action_space, 2)
    worker = entry.build_policy(cfg, env.observation_space, env.action_space)  # as rollout workers and load do
    for policy in (learner.policy, worker):  # the encoder is in the network that acts
        network = policy.model if algo in ("ppo", "appo", "dqn") else policy.actor
        assert any(isinstance(m, nn.LayerNorm) for m in network.modules())
    worker.set_weights(learner.policy.get_weights(), version=3)
    obs = np.stack([env.observation_space.sample() for _ in range(5)])
    np.testing.assert_array_equal(worker.act(obs, "eval").env_action, learner.policy.act(obs, "eval").env_action)
    assert worker.predict(obs[0]).shape == env.action_space.shape


def test_images_reach_the_encoder_as_images_not_flattened(nets):
    space = gym.spaces.Box(0, 255, (3, 8, 8), np.uint8)
    cfg = build_config("ppo", {"ppo": {"encoder": f"{nets}:cnn", "hidden_sizes": []}}).ppo
    policy = get_algo("ppo").build_policy(cfg, space, gym.spaces.Discrete(3))
    out = policy.act(np.stack([space.sample() for _ in range(4)]), "collect")
    assert out.action.shape == (4,) and out.value.shape == (4,)
    assert len(policy.model.actor_head) == 1  # hidden_sizes []: one linear layer on the features


@pytest.mark.parametrize("algo", ["dqn", "sac", "td3", "redq"])
def test_off_policy_updates_train_the_encoder_and_keep_a_separate_target_copy(nets, algo):
    torch.manual_seed(0)
    env = gym.make(CASES[algo])
    every_update = {"policy_delay": 1} if algo in ("td3", "redq") else {}  # (their actor learns every update)
    cfg = getattr(build_config(algo, {algo: {"encoder": f"{nets}:mlp", **every_update}}), algo)
    learner = get_algo(algo).algo_cls(cfg, env.observation_space, env.action_space, 1)
    n = 32
    rng = np.random.default_rng(0)
    obs = rng.normal(size=(n, *env.observation_space.shape)).astype(np.float32)
    action = (rng.integers(0, 2, n) if algo == "dqn" else rng.uniform(-1, 1, (n, 1)).astype(np.float32))
    batch = {"obs": obs, "next_obs": obs[::-1].copy(), "action": action,
             "reward": rng.normal(size=n).astype(np.float32), "terminated": np.zeros(n, np.float32),
             "discount": np.full(n, 0.99, np.float32)}
    networks = [learner.policy.model] if algo == "dqn" else [learner.policy.actor, learner.critic]
    before = [[p.detach().clone() for p in net.encoder.parameters()] for net in networks]
    target_before = [p.detach().clone() for p in learner.target.encoder.parameters()]
    learner.learn(batch)
    for net, old in zip(networks, before):
        assert any(not torch.equal(p, q) for p, q in zip(net.encoder.parameters(), old))
    assert learner.target.encoder is not networks[-1].encoder
    if algo == "dqn":  # a hard copy every target_update_period updates: untouched by one update
        assert all(torch.equal(p, q) for p, q in zip(learner.target.encoder.parameters(), target_before))


def test_crossq_updates_train_the_encoders_of_actor_and_critics(nets):
    torch.manual_seed(0)
    env = gym.make("Pendulum-v1")
    learner = get_algo("crossq").algo_cls(build_config("crossq", {"crossq": {"encoder": f"{nets}:mlp"}}).crossq,
                                          env.observation_space, env.action_space, 1)
    rng, n = np.random.default_rng(0), 32
    obs = rng.normal(size=(n, 3)).astype(np.float32)
    batch = {"obs": obs, "next_obs": obs[::-1].copy(), "action": rng.uniform(-1, 1, (n, 1)).astype(np.float32),
             "reward": rng.normal(size=n).astype(np.float32), "terminated": np.zeros(n, np.float32),
             "discount": np.full(n, 0.99, np.float32)}
    networks = [learner.policy.actor, learner.critic]
    before = [[p.detach().clone() for p in net.encoder.parameters()] for net in networks]
    learner.learn(batch)  # (the first update steps the actor too)
    for net, old in zip(networks, before):
        assert any(not torch.equal(p, q) for p, q in zip(net.encoder.parameters(), old))
    assert learner.policy.actor.encoder is not learner.critic.encoder


@pytest.mark.parametrize("factory, expected", [
    ("no_such_module_xyz:build", "cannot import module 'no_such_module_xyz' (ModuleNotFoundError"),
    ("{nets}:mpl", "has no 'mpl': did you mean {nets}:mlp?"),
    ("{nets}:NOT_CALLABLE", "= 3 is not callable"),
    ("{nets}:no_arguments", "raised TypeError"),
    ("{nets}:not_a_module", "returned a str, not a torch.nn.Module"),
    ("{nets}:three_d", "returned (2, 2, 2) for observations [2, 4], expected features [2, F]"),
    ("{nets}:wrong_width", "failed on a batch of observations of shape [2, 4] (float32)"),
    ("{nets}:not_finite", "non-finite features"),
])
def test_a_bad_encoder_is_one_config_error_before_the_run_directory_is_written(nets, tmp_path, factory, expected):
    reference = factory.format(nets=nets)
    with pytest.raises(ConfigError) as caught:
        relayrl.train("ppo", "CartPole-v1", {"ppo": {"encoder": reference}}, total_steps=64, run_dir=tmp_path / "run")
    message = str(caught.value)
    assert message.startswith(f"ppo.encoder {reference!r}") and expected.format(nets=nets) in message
    assert "\n" not in message
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("value", ["mypkg.nets", "mypkg.nets:", ":build", "my pkg:build"])
def test_a_reference_that_is_not_module_colon_function_is_refused_by_the_config(value):
    with pytest.raises(ConfigError, match=r"ppo\.encoder.*expected \"package\.module:function\""):
        build_config("ppo", {"ppo": {"encoder": value}})


@pytest.mark.parametrize("shared_trunk", [False, True])
def test_recurrent_ppo_puts_its_recurrent_layers_on_the_encoder(nets, shared_trunk):
    cfg = build_config("ppo", {"ppo": {"encoder": f"{nets}:mlp", "recurrent": "gru",
                                       "shared_trunk": shared_trunk}}).ppo
    env = gym.make("CartPole-v1")
    policy = get_algo("ppo").build_policy(cfg, env.observation_space, env.action_space)
    model = policy.model
    assert isinstance(model.actor_encoder[2], nn.LayerNorm) and model.actor_rnn.input_size == 32
    assert (model.critic_encoder is None) == shared_trunk  # a shared trunk reads the actor's features
    encoders = [model.actor_encoder] + ([] if shared_trunk else [model.critic_encoder])
    assert {id(p) for e in encoders for p in e.parameters()} <= \
        {id(p) for p in model.actor_parameters() + model.critic_parameters()}  # each is trained by an optimiser
    obs = np.stack([env.observation_space.sample() for _ in range(3)])
    actions, state = policy.predict(obs, None)
    assert actions.shape == (3,) and state.shape == (3, policy.state_size)


def test_the_default_network_is_unchanged():
    env = gym.make("CartPole-v1")
    cfg = build_config("ppo").ppo
    assert cfg.encoder is None
    policy = get_algo("ppo").build_policy(cfg, env.observation_space, env.action_space)
    assert sorted(policy.model.state_dict()) == sorted(  # checkpoints written before the field existed still load
        f"{net}.{i}.{kind}" for net in ("actor", "critic") for i in (0, 2, 4) for kind in ("weight", "bias"))


def test_a_checkpoint_rebuilds_its_encoder_and_one_whose_reference_no_longer_imports_is_a_checkpoint_error(
        nets, tmp_path, tiny_config):
    cfg = tiny_config(f"ppo.encoder={nets}:mlp")
    run = relayrl.train("ppo", "CartPole-v1", cfg, run_dir=tmp_path / "run", tensorboard=False)
    assert f"encoder: '{nets}:mlp'" in (run.run_dir / "config.yaml").read_text()
    policy = relayrl.load(run.run_dir)
    assert isinstance(policy.model.actor_encoder[2], nn.LayerNorm)
    assert policy.predict(np.zeros(4, np.float32)) in (0, 1)
    resumed = relayrl.train("ppo", "CartPole-v1", cfg, run_dir=run.run_dir, resume=True, total_steps=256,
                            tensorboard=False)
    assert resumed.summary["env_steps"] >= 256

    (tmp_path / f"{nets}.py").unlink()  # the module is gone
    sys.modules.pop(nets)
    with pytest.raises(CheckpointError, match=f"cannot import module '{nets}'") as caught:
        relayrl.load(run.run_dir)
    assert "\n" not in str(caught.value)
    # relayrl eval (a process where the module never was importable): exit 2, one line
    ev = subprocess.run([sys.executable, "-m", "relayrl", "eval", str(run.run_dir), "--episodes", "1"],
                        capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert ev.returncode == 2, ev.stderr
    assert f"cannot import module '{nets}'" in ev.stderr and len(ev.stderr.strip().splitlines()) == 1


def test_relayrl_train_exits_2_with_one_line_for_an_encoder_that_does_not_import(tmp_path):
    result = subprocess.run([sys.executable, "-m", "relayrl", "train", "ppo", "--env", "CartPole-v1", "--set",
                             "ppo.encoder=no_such_pkg.nets:build", "--quiet"],
                            capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert result.returncode == 2, result.stderr
    assert "ppo.encoder 'no_such_pkg.nets:build': cannot import module 'no_such_pkg.nets'" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr
    assert not (tmp_path / "runs").exists()
