"""Every algorithm takes the built-in encoders (policy/encoders.py) when ``<algo>.encoder`` is null: images get a
CNN (scaled inside the network), Discrete observations one-hot; a learning step trains the encoder; PPO learns an
image task and DQN a Discrete-observation one (FrozenLake); ``relayrl.load(...).predict`` takes an image."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

import relayrl
from relayrl.algos import get_algo
from relayrl.config import build_config
from relayrl.envs.managers import make_vec
from relayrl.errors import ConfigError
from relayrl.policy.encoders import NatureCNN, OneHot, SmallCNN
from relayrl.training.collector import OnPolicyCollector

IMAGES = "relayrl.testing.envs:relayrl-test/DtypeObs-v0"  # random uint8 pictures, 20-step episodes
BANDIT = "relayrl.testing.envs:relayrl-test/ImageBandit-v0"  # the picture shows which action pays


def snapshot(module: torch.nn.Module) -> list[torch.Tensor]:
    return [p.detach().clone() for p in module.parameters()]


def changed(module: torch.nn.Module, before: list[torch.Tensor]) -> bool:
    return any(not torch.equal(p, q) for p, q in zip(module.parameters(), before))


ON_POLICY = [("ppo", {}), ("ppo", {"shared_trunk": False}), ("ppo", {"recurrent": "gru", "shared_trunk": False}),
             ("ppo", {"recurrent": "lstm"}), ("appo", {})]


@pytest.mark.parametrize("algo, options", ON_POLICY, ids=["ppo", "ppo-separate", "ppo-gru-separate", "ppo-lstm",
                                                          "appo"])
@pytest.mark.parametrize("shape", [(6, 6, 3), (3, 6, 6)], ids=["last", "first"])
def test_on_policy_algorithms_collect_images_and_a_learning_step_trains_their_cnns(algo, options, shape):
    torch.manual_seed(0)
    sets = {"num_steps": 16, "batch_size": 16, "epochs": 1, "seq_len": 8, "batch_trajectories": 2, **options}
    cfg = getattr(build_config(algo, {algo: sets}), algo)
    with make_vec(IMAGES, 2, env_kwargs={"dtype": "uint8", "shape": shape, "actions": "discrete"}) as venv:
        learner = get_algo(algo).algo_cls(cfg, venv.single_observation_space, venv.single_action_space, 2)
        model = learner.policy.model
        assert isinstance(model.actor_encoder, SmallCNN) and model.actor_encoder.layout.channels == 3
        collector = OnPolicyCollector(venv, learner.policy, 16)
        collector.reset(seed=0)
        rollout = collector.collect()
    assert rollout["obs"].dtype == np.uint8 and rollout["obs"].shape == (16, 2, *shape)  # uint8 in the rollout
    assert (model.critic_encoder is None) == (options.get("shared_trunk") is not False)  # shared by default
    encoders = [model.actor_encoder] + ([model.critic_encoder] if model.critic_encoder is not None else [])
    before = [snapshot(e) for e in encoders]
    metrics = learner.learn(rollout)
    assert np.isfinite(metrics["loss/policy"]) and np.isfinite(metrics["loss/value"])
    assert all(changed(e, b) for e, b in zip(encoders, before))


@pytest.mark.parametrize("algo", ["dqn", "sac", "td3", "redq", "crossq"])
@pytest.mark.parametrize("space", [gym.spaces.Box(0, 255, (36, 36, 2), np.uint8), gym.spaces.Discrete(5)],
                         ids=["nature-cnn", "one-hot"])
def test_off_policy_algorithms_learn_through_the_built_in_encoders(algo, space):
    torch.manual_seed(0)
    actions = gym.spaces.Discrete(3) if algo == "dqn" else gym.spaces.Box(-1, 1, (2,))
    every_update = {"policy_delay": 1} if algo in ("td3", "redq") else {}  # (their actor learns every update)
    critic = {"critic_hidden_sizes": [16, 16]} if algo == "crossq" else {}
    cfg = getattr(build_config(algo, {algo: {"hidden_sizes": [16, 16], **every_update, **critic}}), algo)
    learner = get_algo(algo).algo_cls(cfg, space, actions, 1)
    expected = OneHot if isinstance(space, gym.spaces.Discrete) else NatureCNN
    networks = [learner.policy.model] if algo == "dqn" else [learner.policy.actor, learner.critic]
    assert all(isinstance(net.encoder, expected) for net in networks)
    if algo != "crossq":  # (CrossQ has no target network)
        assert learner.target.encoder is not networks[-1].encoder
    n, rng = 8, np.random.default_rng(0)
    space.seed(0)
    obs = np.stack([space.sample() for _ in range(2 * n)])
    batch = {"obs": obs[:n], "next_obs": obs[n:], "reward": rng.normal(size=n).astype(np.float32),
             "action": (rng.integers(0, 3, n) if algo == "dqn" else rng.uniform(-1, 1, (n, 2)).astype(np.float32)),
             "terminated": np.zeros(n, np.float32), "discount": np.full(n, 0.99, np.float32)}
    before = [snapshot(net) for net in networks]
    learner.learn(batch)
    assert all(changed(net, b) for net, b in zip(networks, before))
    assert learner.policy.predict(obs[0]).shape == actions.shape


def test_ppo_with_obs_norm_reads_normalised_images_unscaled_and_refuses_to_normalise_categories():
    cfg = build_config("ppo", {"ppo": {"obs_norm": True}}).ppo
    policy = get_algo("ppo").build_policy(cfg, gym.spaces.Box(0, 255, (8, 8, 1), np.uint8), gym.spaces.Discrete(2))
    assert policy.model.actor_encoder.scale == 1.0  # the statistics already centre and scale the pixels
    with pytest.raises(ConfigError, match=r"ppo.obs_norm=true .* Discrete\(16\) observations are categories"):
        get_algo("ppo").build_policy(cfg, gym.spaces.Discrete(16), gym.spaces.Discrete(4))


@pytest.mark.parametrize("channels_first", [False, True], ids=["last", "first"])
def test_ppo_learns_which_arm_a_picture_shows_and_the_loaded_policy_reads_pictures(tmp_path, channels_first):
    env = {"num_envs": 8, "manager": "sync", "kwargs": {"size": 10, "channels": 3, "arms": 4,
                                                        "channels_first": channels_first}}
    config = {"env": env, "ppo": {"num_steps": 16, "batch_size": 64, "epochs": 4, "hidden_sizes": [],
                                  "actor_lr": 1e-3, "critic_lr": 1e-3},
              "eval": {"freq": 512, "episodes": 40, "num_envs": 4}, "threads": 1}
    bandit = gym.make(BANDIT, **env["kwargs"])

    def hits(policy) -> int:
        count = 0
        for seed in range(20):
            picture, info = bandit.reset(seed=seed)
            assert picture.dtype == np.uint8
            count += int(policy.predict(picture)) == info["arm"]
        return count

    torch.manual_seed(0)
    untrained = get_algo("ppo").build_policy(build_config("ppo", config).ppo, bandit.observation_space,
                                             bandit.action_space)
    assert hits(untrained) <= 12  # about 5 in 20 by chance
    run = relayrl.train("ppo", BANDIT, config, total_steps=4096, stop_value=0.95, seed=0, run_dir=tmp_path / "run",
                        tensorboard=False)
    assert run.summary["best_eval_return"] >= 0.9, run.summary  # random: 1 / 4 arms
    policy = relayrl.load(run.run_dir)
    assert isinstance(policy.model.actor_encoder, SmallCNN)
    assert hits(policy) >= 17


def test_dqn_learns_frozenlake_from_one_hot_observations(tmp_path):
    """FrozenLake's 16 cells are a Discrete observation (refused before the built-in encoders). A random
    policy reaches the goal in about 1.5% of episodes; DQN's greedy policy walks there after a few thousand steps."""
    kwargs = {"is_slippery": False}
    env = gym.make("FrozenLake-v1", **kwargs)
    env.action_space.seed(0)
    random_wins = 0
    for episode in range(300):
        env.reset(seed=episode)
        done, reward = False, 0.0
        while not done:
            _, reward, terminated, truncated, _ = env.step(env.action_space.sample())
            done = terminated or truncated
        random_wins += reward
    config = {"env": {"num_envs": 8, "manager": "sync", "kwargs": kwargs},
              "dqn": {"start_training": 256, "epsilon_decay_steps": 4000, "buffer_size": 10_000,
                      "target_update_period": 64, "hidden_sizes": [64, 64]},
              "eval": {"freq": 512, "episodes": 4, "num_envs": 4}, "threads": 1}
    run = relayrl.train("dqn", "FrozenLake-v1", config, total_steps=8000, seed=0, run_dir=tmp_path / "run",
                        tensorboard=False)
    assert random_wins / 300 < 0.1
    assert run.summary["best_eval_return"] == 1.0, run.summary
    policy = relayrl.load(run.run_dir)
    assert isinstance(policy.model.encoder, OneHot)
    obs, _ = env.reset(seed=0)
    assert policy.predict(obs) in range(4) and policy.predict(np.array([0, 1, 2])).shape == (3,)


@pytest.mark.parametrize("algo", ["ppo", "appo"])
def test_on_policy_algorithms_run_on_discrete_observations(tmp_path, algo):
    config = {"env": {"num_envs": 2, "manager": "sync"}, algo: {"num_steps": 32, "batch_size": 32, "epochs": 1},
              "eval": {"freq": 128, "episodes": 2, "num_envs": 2}, "threads": 1}
    run = relayrl.train(algo, "FrozenLake-v1", config, total_steps=256, seed=0, run_dir=tmp_path / "run",
                        tensorboard=False)
    assert run.summary["updates"] > 0 and run.summary["last_eval_return"] is not None
    model = relayrl.load(run.run_dir).model
    assert isinstance(model.actor_encoder, OneHot) and model.critic_encoder is None  # one trunk for both heads


def test_the_mirror_loss_is_refused_for_observations_that_are_not_vectors():
    cfg = build_config("ppo", {"ppo": {"mirror": 1.0}}).ppo
    algo = get_algo("ppo").algo_cls(cfg, gym.spaces.Box(0, 255, (6, 6, 1), np.uint8), gym.spaces.Discrete(2), 1)
    with pytest.raises(ConfigError, match=r"ppo.mirror reflects observation vectors .* set ppo.mirror=0"):
        algo.bind_env("relayrl-test/ImageBandit-v0")
