"""Built-in encoders (relayrl/policy/encoders.py): the Nature CNN and the small CNN in both channel layouts,
scaling inside the network, one-hot for Discrete and MultiDiscrete, the automatic choice, and one refusal per
space no built-in network takes, each naming the space, what is supported and the fix."""

from __future__ import annotations

import sys
import uuid

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch import nn

import relayrl
from relayrl.algos import get_algo
from relayrl.algos.dqn import QNetwork
from relayrl.config import build_config
from relayrl.data.dtypes import to_stored, to_tensor
from relayrl.errors import EnvError
from relayrl.policy.actor_critic import ActorCritic
from relayrl.policy.encoders import (NatureCNN, OneHot, SmallCNN, choose, image_layout, make_encoder)

Box, Discrete, MultiDiscrete = gym.spaces.Box, gym.spaces.Discrete, gym.spaces.MultiDiscrete


def images(space: gym.spaces.Box, n: int, seed: int = 0) -> np.ndarray:
    space.seed(seed)
    return np.stack([space.sample() for _ in range(n)])


def same_weights(a: nn.Module, b: nn.Module) -> None:
    b.load_state_dict(a.state_dict())


@pytest.mark.parametrize("cls, side, channels, features", [
    (NatureCNN, 36, 3, 512), (NatureCNN, 40, 4, 512), (SmallCNN, 10, 3, 128), (SmallCNN, 5, 4, 128),
    (SmallCNN, 2, 1, 128)])  # sides under 3: padded
def test_both_layouts_give_the_same_features_for_the_same_picture(cls, side, channels, features):
    first = Box(0, 255, (channels, side, side), np.uint8)
    last = Box(0, 255, (side, side, channels), np.uint8)
    torch.manual_seed(0)
    a, b = cls(first), cls(last)
    same_weights(a, b)
    chw = images(first, 4)
    out_first = a(torch.as_tensor(chw, dtype=torch.float32))
    out_last = b(torch.as_tensor(chw.transpose(0, 2, 3, 1), dtype=torch.float32))
    assert out_first.shape == (4, features) == (4, a.features)
    torch.testing.assert_close(out_first, out_last)
    assert (out_first >= 0).all()  # ends in a ReLU


def test_uint8_pixels_are_scaled_to_0_1_inside_the_network_and_bool_and_unit_floats_are_not():
    pixels, unit = Box(0, 255, (10, 10, 4), np.uint8), Box(0.0, 1.0, (10, 10, 4), np.float32)
    torch.manual_seed(0)
    on_pixels, on_unit, on_planes = SmallCNN(pixels), SmallCNN(unit), SmallCNN(Box(0, 1, (10, 10, 4), bool))
    same_weights(on_pixels, on_unit)
    same_weights(on_pixels, on_planes)
    x = images(pixels, 3)
    torch.testing.assert_close(on_pixels(torch.as_tensor(x, dtype=torch.float32)),
                               on_unit(torch.as_tensor(x / 255.0, dtype=torch.float32)))
    planes = x > 127  # MinAtar's bool planes: stored as uint8 0/1, the network sees them as 0.0/1.0
    stored = to_stored(planes)
    assert stored.dtype == np.uint8 and stored.nbytes == planes.nbytes
    torch.testing.assert_close(on_planes(to_tensor(stored)), on_unit(torch.as_tensor(planes, dtype=torch.float32)))
    # the Nature CNN's first layer sees [0, 1] too; normalised input (ppo.obs_norm) is read unscaled
    assert NatureCNN(Box(0, 255, (4, 36, 36), np.uint8)).scale == pytest.approx(1 / 255)
    assert NatureCNN(Box(0, 255, (4, 36, 36), np.uint8), scale=False).scale == 1.0


@pytest.mark.parametrize("shape, channels_first, channels", [
    ((4, 84, 84), True, 4), ((84, 84, 4), False, 4), ((3, 64, 8), True, 3), ((10, 10, 6), False, 6),
    ((1, 40, 60), True, 1), ((10, 10, 10), False, 10), ((3, 5, 3), False, 3)])  # ties: channels-last
def test_the_channels_are_the_smaller_of_the_first_and_last_axis(shape, channels_first, channels):
    layout = image_layout(shape)
    assert (layout.channels_first, layout.channels) == (channels_first, channels)
    assert sorted((layout.channels, layout.height, layout.width)) == sorted(shape)


@pytest.mark.parametrize("space, kind", [
    (Box(0, 255, (84, 84, 4), np.uint8), "nature_cnn"),
    (Box(0, 255, (4, 36, 36), np.uint8), "nature_cnn"),
    (Box(0, 255, (3, 35, 64), np.uint8), "small_cnn"),  # the smaller side decides
    (Box(0, 1, (10, 10, 4), bool), "small_cnn"),  # MinAtar
    (Box(0.0, 1.0, (3, 64, 64), np.float32), "nature_cnn"),
    (Discrete(16), "one_hot"), (MultiDiscrete([3, 4]), "one_hot"),
    (Box(-np.inf, np.inf, (4,), np.float32), "mlp"), (Box(0, 255, (12,), np.uint8), "mlp"),
    (Box(-1.0, 1.0, (), np.float32), "mlp"), (gym.spaces.MultiBinary(5), "mlp"),
])
def test_the_automatic_choice(space, kind):
    assert choose(space) == kind


def test_one_hot_encodes_discrete_and_multidiscrete_observations_with_their_start():
    enc = OneHot(Discrete(4, start=1))
    torch.testing.assert_close(enc(torch.tensor([1.0, 4.0, 2.0])), torch.eye(4)[[0, 3, 1]])
    enc = OneHot(MultiDiscrete([[2, 3], [1, 2]], start=[[0, 1], [0, 0]]))  # rank 2: flattened, 2+3+1+2 columns
    out = enc(torch.tensor([[[1.0, 3.0], [0.0, 1.0]]]))
    assert enc.features == 8 and out.tolist() == [[0, 1, 0, 0, 1, 1, 0, 1]]
    assert out.dtype == torch.float32


CANNOT = [
    (Box(0, 255, (84, 84), np.uint8), ["a rank-2 uint8 Box looks like an image without a channel axis",
                                       "ReshapeObservation(env, (84, 84, 1))", "FlattenObservation"]),
    (Box(0, 255, (4, 84, 84, 3), np.uint8), ["a rank-4 uint8 Box is not an image", "(k, H, W, C) -> (H, W, k*C)"]),
    (Box(-1.0, 1.0, (3, 8, 8), np.float32), ["read as an image, but its floats are not bounded in [0, 1] (low -1, "
                                             "high 1)", "Images are uint8 (0..255), bool, or floats in [0, 1]"]),
    (Box(0, 1000, (3, 8, 8), np.int16), ["its dtype int16 is not an image's"]),
    (Box(-1.0, 1.0, (5, 6), np.float32), ["a rank-2 Box that is not an image", "FlattenObservation"]),
    (gym.spaces.Dict({"pos": Box(-1, 1, (2,))}), ["cannot be read by ppo's networks as it is",
                                                  "make the env with relayrl.envs.make", "PackDict"]),
]


@pytest.mark.parametrize("space, expected", CANNOT, ids=[str(s.shape) if s.shape else "Dict" for s, _ in CANNOT])
def test_a_space_no_built_in_network_takes_is_one_env_error_naming_it_what_is_supported_and_the_fix(space, expected):
    with pytest.raises(EnvError) as caught:
        get_algo("ppo").build_policy(build_config("ppo").ppo, space, Discrete(2))
    message = str(caught.value)
    assert message.startswith(f"observation space {space}") and "\n" not in message
    for part in expected:
        assert part in message
    if not isinstance(space, gym.spaces.Dict):
        assert 'give ppo.encoder: "package.module:function"' in message  # the override, by its config key


@pytest.mark.parametrize("algo", ["dqn", "sac"])
def test_the_refusal_names_each_algorithm_s_own_key(algo):
    actions = Discrete(2) if algo == "dqn" else Box(-1, 1, (1,))
    with pytest.raises(EnvError, match=f"give {algo}.encoder"):
        get_algo(algo).build_policy(getattr(build_config(algo), algo), Box(0, 255, (8, 8), np.uint8), actions)


def test_a_refused_space_stops_the_run_before_the_run_directory_is_written(tmp_path):
    env = "relayrl.testing.envs:relayrl-test/DtypeObs-v0"
    with pytest.raises(EnvError, match="rank-2 uint8 Box"):
        relayrl.train("ppo", env, {"env": {"kwargs": {"dtype": "uint8", "shape": [12, 12]}, "manager": "sync"}},
                      total_steps=64, run_dir=tmp_path / "run")
    assert not (tmp_path / "run").exists()


@pytest.fixture
def own_module(tmp_path, monkeypatch):
    name = f"user_pixels_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text(
        "from torch import nn\n\n\ndef stack(observation_space, action_space):\n"
        "    return nn.Sequential(nn.Flatten(), nn.LazyLinear(8))\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield name
    sys.modules.pop(name, None)


def test_your_encoder_overrides_the_choice_even_for_a_space_the_built_ins_refuse(own_module):
    space = Box(0, 255, (2, 6, 6, 3), np.uint8)  # rank 4: refused without an encoder
    cfg = build_config("ppo", {"ppo": {"encoder": f"{own_module}:stack"}}).ppo
    policy = get_algo("ppo").build_policy(cfg, space, Discrete(2))
    assert policy.model.actor_encoder[1].out_features == 8 and policy.predict(images(space, 1)[0]) in (0, 1)


def test_a_built_in_encoder_can_be_named_as_a_reference():
    space = Box(0, 255, (40, 40, 3), np.uint8)  # automatic: the Nature CNN
    cfg = build_config("dqn", {"dqn": {"encoder": "relayrl.policy.encoders:small_cnn"}}).dqn
    assert isinstance(get_algo("dqn").build_policy(cfg, space, Discrete(2)).model.encoder, SmallCNN)
    built, features = make_encoder(None, space, Discrete(2), "dqn.encoder")
    assert isinstance(built, NatureCNN) and features == 512


@pytest.mark.parametrize("algo, env", [("ppo", "CartPole-v1"), ("dqn", "CartPole-v1"), ("sac", "Pendulum-v1")])
def test_flat_observations_keep_the_mlps_exactly(algo, env):
    """Vector envs get what they got before the built-in encoders: same classes, same parameters, same draws."""
    env = gym.make(env)
    cfg = getattr(build_config(algo), algo)
    torch.manual_seed(0)
    policy = get_algo(algo).build_policy(cfg, env.observation_space, env.action_space)
    torch.manual_seed(0)
    obs_dim = int(np.prod(env.observation_space.shape))
    if algo == "ppo":
        model, before = policy.model, ActorCritic(obs_dim, int(env.action_space.n), True, cfg)
    elif algo == "dqn":
        model, before = policy.model, QNetwork(obs_dim, int(env.action_space.n), cfg)
    else:
        from relayrl.algos.sac import Actor
        model, before = policy.actor, Actor(obs_dim, 1, cfg.hidden_sizes)
    assert type(model) is type(before) and policy.obs_view == (-1,)
    for (name, p), (other, q) in zip(model.state_dict().items(), before.state_dict().items(), strict=True):
        assert name == other and torch.equal(p, q)
