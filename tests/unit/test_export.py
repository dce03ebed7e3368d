"""relayrl export: the exported file, run by onnxruntime or torch.jit.load alone, gives the actions
``predict`` gives (exactly for Discrete, allclose for Box) on 100 observations, for every algorithm, with
the observation normaliser, images through the CNN, and a recurrent state carried in and out."""

from __future__ import annotations

import json
import sys

import gymnasium as gym
import numpy as np
import pytest
import torch

from relayrl.algos import get_algo
from relayrl.cli import main
from relayrl.config import build_config
from relayrl.core import Policy
from relayrl.errors import ConfigError
from relayrl.export import export_policy
from relayrl.policy.encoders import SmallCNN
from relayrl.policy.graph import ARGMAX, ObservationInput, PolicyGraph
from relayrl.training.trainer import run_trainer
from relayrl.types import PolicyOutput

onnxruntime = pytest.importorskip("onnxruntime")
pytestmark = pytest.mark.filterwarnings("ignore:`torch.jit.load` is deprecated:DeprecationWarning")

VECTOR = gym.spaces.Box(-np.inf, np.inf, (5,), np.float32)
IMAGE = gym.spaces.Box(0, 255, (4, 10, 10), np.uint8)
CASES = {
    "ppo-discrete-obs_norm": ("ppo", VECTOR, gym.spaces.Discrete(3), ["ppo.obs_norm=true"]),
    "ppo-box-obs_norm": ("ppo", VECTOR, gym.spaces.Box(-0.5, 2.0, (2,), np.float32), ["ppo.obs_norm=true"]),
    "ppo-lstm": ("ppo", VECTOR, gym.spaces.Discrete(3), ["ppo.recurrent=lstm", "ppo.recurrent_hidden=16"]),
    "appo-image": ("appo", IMAGE, gym.spaces.Discrete(4), []),
    "dqn-dueling": ("dqn", VECTOR, gym.spaces.Discrete(4), ["dqn.dueling=true", "dqn.hidden_sizes=[32,32]"]),
    "dqn-categories": ("dqn", gym.spaces.Discrete(7), gym.spaces.Discrete(3), ["dqn.hidden_sizes=[32]"]),
    "sac-box": ("sac", VECTOR, gym.spaces.Box(-2.0, 3.0, (2,), np.float32), ["sac.hidden_sizes=[32,32]"]),
    "td3-box": ("td3", VECTOR, gym.spaces.Box(-2.0, 3.0, (2,), np.float32), ["td3.hidden_sizes=[32,32]"]),
    "redq-image": ("redq", IMAGE, gym.spaces.Box(-1.0, 1.0, (2,), np.float32), ["redq.hidden_sizes=[32]"]),
    "bc-image": ("bc", IMAGE, gym.spaces.Discrete(4, start=1), ["bc.hidden_sizes=[32]"]),
    "bc-box": ("bc", VECTOR, gym.spaces.Box(-2.0, 3.0, (2,), np.float32), ["bc.hidden_sizes=[32,32]"]),
    "iql-box": ("iql", VECTOR, gym.spaces.Box(-2.0, 3.0, (2,), np.float32), ["iql.hidden_sizes=[32,32]"]),
    "a2c-box-obs_norm": ("a2c", VECTOR, gym.spaces.Box(-0.5, 2.0, (2,), np.float32), ["a2c.obs_norm=true"]),
    "a2c-gru": ("a2c", VECTOR, gym.spaces.Discrete(3), ["a2c.recurrent=gru", "a2c.recurrent_hidden=16"]),
    "pqn-layer-norm": ("pqn", VECTOR, gym.spaces.Discrete(4), ["pqn.hidden_sizes=[32,32]"]),
    "pqn-image": ("pqn", IMAGE, gym.spaces.Discrete(4), ["pqn.hidden_sizes=[]"]),
}


def build(algo, obs_space, act_space, sets):
    """A fresh policy with weights spread out (an untrained PPO head's logits are all near 0) and, with
    obs_norm, statistics far from the identity."""
    torch.manual_seed(0)
    policy = get_algo(algo).build_policy(build_config(algo, None, sets).algo_config, obs_space, act_space)
    for params in policy.get_weights().values():
        for tensor in params.values() if isinstance(params, dict) else []:
            if torch.is_tensor(tensor) and tensor.is_floating_point():
                fan_in = int(np.prod(tensor.shape[1:])) if tensor.ndim > 1 else 0
                tensor.normal_(0.0, 2.0 / np.sqrt(fan_in) if fan_in else 0.1)
    if policy.obs_rms is not None:
        policy.obs_rms.update(np.random.default_rng(0).normal(2.0, 3.0, (500, *obs_space.shape)))
    return policy


def observations(space, n=100, seed=7):
    space.seed(seed)
    return np.stack([np.asarray(space.sample(), space.dtype) for _ in range(n)])


def run_exported(path, fmt, obs, state=None):
    if fmt == "onnx":
        session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        return session.run(None, {"obs": obs} if state is None else {"obs": obs, "state": state})
    module = torch.jit.load(str(path))
    out = module(torch.from_numpy(obs), *([] if state is None else [torch.from_numpy(state)]))
    return [t.numpy() for t in (out if isinstance(out, tuple) else (out,))]


@pytest.mark.parametrize("fmt", ["onnx", "torchscript"])
@pytest.mark.parametrize("case", list(CASES))
def test_the_exported_policy_acts_as_predict(tmp_path, case, fmt):
    algo, obs_space, act_space, sets = CASES[case]
    policy = build(algo, obs_space, act_space, sets)
    exported = export_policy(policy, tmp_path / f"policy.{fmt}", fmt)
    obs = observations(obs_space)
    if policy.recurrent:  # two steps, the state carried by the caller as predict(obs, state) carries it
        want, want_state = policy.predict(obs, None)
        got, got_state = run_exported(exported.path, fmt, obs, np.zeros((100, policy.state_size), np.float32))
        np.testing.assert_allclose(got_state, want_state, rtol=1e-5, atol=1e-6)
        want, _ = policy.predict(obs[::-1].copy(), want_state)
        got, _ = run_exported(exported.path, fmt, obs[::-1].copy(), got_state)
    else:
        (got,), want = run_exported(exported.path, fmt, obs), policy.predict(obs)
    assert got.shape == want.shape and got.dtype == want.dtype
    if isinstance(act_space, gym.spaces.Discrete):
        np.testing.assert_array_equal(got, want)
        assert len(np.unique(want)) > 1  # the check is not of a constant policy
    else:
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
        assert np.all(got >= act_space.low) and np.all(got <= act_space.high)
    sidecar = json.loads(exported.sidecar.read_text())
    assert sidecar["format"] == fmt and sidecar["observation_space"]["type"] == type(obs_space).__name__
    assert sidecar["inputs"][0] == {"name": "obs", "dtype": np.dtype(obs_space.dtype).name,
                                    "shape": ["batch", *obs_space.shape]}
    if case == "appo-image":
        assert isinstance(policy.model.actor_encoder, SmallCNN)


@pytest.fixture(scope="module")
def cartpole_run(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("export") / "run"
    config = build_config("ppo", None, ["env.num_envs=2", "ppo.num_steps=16", "ppo.batch_size=16", "ppo.epochs=1",
                                        "ppo.obs_norm=true", "eval.freq=0", "eval.episodes=1", "eval.num_envs=1"],
                          {"total_steps": 64})
    run_trainer(config, run_dir=run_dir, tensorboard=False)
    return run_dir


def test_relayrl_export_writes_the_runs_policy(cartpole_run, capsys):
    assert main(["export", str(cartpole_run)]) == 0
    assert "policy.onnx" in capsys.readouterr().out
    sidecar = json.loads((cartpole_run / "policy.onnx.json").read_text())
    assert sidecar["algo"] == "ppo" and sidecar["env"] == "CartPole-v1" and sidecar["env_steps"] >= 64
    import relayrl

    obs = observations(gym.make("CartPole-v1").observation_space)
    got = run_exported(cartpole_run / "policy.onnx", "onnx", obs)[0]
    np.testing.assert_array_equal(got, relayrl.load(cartpole_run).predict(obs))
    out = cartpole_run / "deploy" / "cartpole.pt"
    assert main(["export", str(cartpole_run), "--format", "torchscript", "-o", str(out)]) == 0
    assert out.is_file() and json.loads(out.with_name("cartpole.pt.json").read_text())["format"] == "torchscript"


def test_onnx_without_its_packages_names_the_extra(cartpole_run, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # import onnxruntime now fails
    assert main(["export", str(cartpole_run), "-o", str(cartpole_run / "x.onnx")]) == 2
    err = capsys.readouterr().err
    assert "needs onnxruntime" in err and "-e '.[export]'" in err and err.count("relayrl: error:") == 1
    assert not (cartpole_run / "x.onnx").exists()


def test_a_run_without_a_checkpoint_is_refused(tmp_path, capsys):
    (tmp_path / "run").mkdir()
    assert main(["export", str(tmp_path / "run"), "--format", "torchscript"]) == 2
    assert "no checkpoint" in capsys.readouterr().err


class ScriptedPolicy(Policy):
    observation_space, action_space = VECTOR, gym.spaces.Discrete(2)
    action_shape, action_dtype, obs_dtype = (), np.dtype(np.int64), np.dtype(np.float32)

    def act(self, obs, mode="collect"):
        action = (obs[:, 0] > 0).astype(np.int64)
        return PolicyOutput(action=action, env_action=action)

    def get_weights(self):
        return {}

    def set_weights(self, weights, version=None):
        pass


def test_a_policy_it_does_not_know_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="cannot export a ScriptedPolicy"):
        export_policy(ScriptedPolicy(), tmp_path / "p.pt", "torchscript")
    assert not list(tmp_path.iterdir())


class LinearGraph(torch.nn.Module):
    def __init__(self, policy):
        super().__init__()
        self.observation, self.net = ObservationInput(None, (-1,)), policy.net

    def forward(self, obs):
        return self.net(self.observation(obs)).argmax(-1)


class LinearPolicy(ScriptedPolicy):
    """A policy export knows nothing of: it declares its graph (``Policy.export_graph``), as an algorithm of yours."""

    def __init__(self):
        torch.manual_seed(0)
        self.net = torch.nn.Linear(5, 3)
        self.action_space = gym.spaces.Discrete(3)

    def act(self, obs, mode="collect"):
        with torch.no_grad():
            action = self.net(torch.as_tensor(obs, dtype=torch.float32)).argmax(-1).numpy()
        return PolicyOutput(action=action, env_action=action)

    def export_graph(self):
        return PolicyGraph(LinearGraph(self), ARGMAX)


@pytest.mark.parametrize("fmt", ["onnx", "torchscript"])
def test_a_policy_of_your_own_exports_through_its_export_graph(tmp_path, fmt):
    policy = LinearPolicy()
    exported = export_policy(policy, tmp_path / f"policy.{fmt}", fmt)
    obs = observations(VECTOR)
    (got,), want = run_exported(exported.path, fmt, obs), policy.predict(obs)
    np.testing.assert_array_equal(got, want)
    assert len(np.unique(want)) > 1
    assert json.loads(exported.sidecar.read_text())["includes"] == [ARGMAX]


class WrongGraphPolicy(LinearPolicy):
    def export_graph(self):
        return LinearGraph(self)  # the module itself, not a PolicyGraph


def test_an_export_graph_that_is_no_policy_graph_is_refused_naming_what_to_return(tmp_path):
    with pytest.raises(ConfigError, match=r"WrongGraphPolicy.export_graph\(\) returned a LinearGraph: return "
                                          r"relayrl.policy.graph.PolicyGraph\(module, post_processing\)"):
        export_policy(WrongGraphPolicy(), tmp_path / "p.pt", "torchscript")
    assert not list(tmp_path.iterdir())


def test_a_dict_of_images_exports_as_packed_rows_and_other_dicts_are_refused_by_key(tmp_path):
    from relayrl.envs.packed import PackedDict

    images = PackedDict(gym.spaces.Dict({"left": gym.spaces.Box(0, 255, (6, 6, 1), np.uint8),
                                         "right": gym.spaces.Box(0, 255, (6, 6, 1), np.uint8)}))
    policy = build("ppo", images, gym.spaces.Discrete(3), [])
    exported = export_policy(policy, tmp_path / "policy.onnx", "onnx")
    rows = images.pack({key: observations(sub) for key, sub in images.space.spaces.items()})
    np.testing.assert_array_equal(run_exported(exported.path, "onnx", rows)[0], policy.predict(rows))
    fields = json.loads(exported.sidecar.read_text())["packed_fields"]
    assert [(f["key"], f["offset"], f["nbytes"]) for f in fields] == [("left", 0, 36), ("right", 36, 36)]

    mixed = PackedDict(gym.spaces.Dict({"image": gym.spaces.Box(0, 255, (6, 6, 1), np.uint8),
                                        "cue": gym.spaces.Box(-1, 1, (2,), np.float32)}))
    with pytest.raises(ConfigError, match=r"keys 'cue' \(float32\) are not uint8.*relayrl.load"):
        export_policy(build("ppo", mixed, gym.spaces.Discrete(3), []), tmp_path / "mixed.onnx", "onnx")
    assert not list(tmp_path.glob("mixed*"))
