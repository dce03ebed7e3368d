"""The learner's device (``--device auto|cpu|cuda``): resolved against the machine and the algorithm,
refused with one message where it cannot be had, and published weights always on the CPU. Runs on a
machine without a GPU; the CUDA cases run where there is one, and PPO's and APPO's learn path also runs
on the meta device, which refuses CPU tensors as CUDA does (``stand_in_device``)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
import yaml

from relayrl import launch
from relayrl.algos import get_algo
from relayrl.cli import main
from relayrl.config import build_config
from relayrl.core import Algorithm
from relayrl.data.dtypes import to_tensor
from relayrl.errors import ConfigError
from relayrl.policy.device import resolve_device
from relayrl.testing.masked import MaskedChoiceEnv

CUDA = torch.cuda.is_available()
SMALL = ["env.num_envs=2", "eval.freq=128", "eval.episodes=2", "eval.num_envs=2", "threads=1"]


def relayrl(capsys, *args) -> tuple[int, str]:
    """The CLI in this process (the cwd is the test's tmp_path): exit code and stderr."""
    code = main([str(a) for a in args])
    return code, capsys.readouterr().err


def test_auto_takes_cuda_only_where_there_is_one_and_the_algorithm_learns_on_it(monkeypatch):
    assert resolve_device("cpu", ("cpu", "cuda"), "dqn") == torch.device("cpu")
    assert resolve_device("auto", ("cpu", "cuda"), "dqn").type == ("cuda" if CUDA else "cpu")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # the decision on a CUDA machine
    for algo in ("dqn", "sac", "crossq", "ppo", "appo", "td3", "redq", "a2c", "pqn"):  # every built-in learns on CUDA
        assert resolve_device("auto", get_algo(algo).algo_cls.devices, algo).type == "cuda"
    assert resolve_device("auto", Algorithm.devices, "reinforce").type == "cpu"  # a user's algorithm, by default
    with pytest.raises(ConfigError, match="reinforce learns on the CPU only: use --device cpu"):
        resolve_device("cuda", Algorithm.devices, "reinforce")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ConfigError, match="no CUDA device.*use --device cpu"):
        resolve_device("cuda", ("cpu", "cuda"), "dqn")


@pytest.mark.skipif(CUDA, reason="this machine has CUDA")
def test_cuda_without_cuda_is_refused_in_one_line_before_anything_is_written(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    code, err = relayrl(capsys, "train", "dqn", "--env", "CartPole-v1", "--device", "cuda", "--quiet")
    assert code == 2, err
    assert "no CUDA device" in err and "--device cpu" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "runs").exists()


def test_device_cpu_from_the_command_line_trains_and_is_recorded(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    sets = [a for s in [*SMALL, "dqn.start_training=64", "dqn.batch_size=16", "dqn.hidden_sizes=[16]"]
            for a in ("--set", s)]
    code, err = relayrl(capsys, "train", "dqn", "--env", "CartPole-v1", "--device", "cpu", "--total-steps", 160,
                        "--run-dir", tmp_path / "run", "--quiet", "--no-tensorboard", *sets)
    assert code == 0, err
    assert yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())["device"] == "cpu"


IMAGES = "relayrl.testing.envs:relayrl-test/ImageBandit-v0"
MASKED = "relayrl.testing.masked:relayrl-test/MaskedChoice-v0"
ON_POLICY = ["num_steps=16", "batch_size=16", "epochs=1", "hidden_sizes=[16]"]
TRAINS = {  # algo, env, its settings: each learner path once (feed-forward image, recurrent, masked, V-trace)
    "sac": ("sac", "Pendulum-v1", ["sac.start_training=64", "sac.batch_size=16", "sac.hidden_sizes=[16, 16]"]),
    "td3": ("td3", "Pendulum-v1", ["td3.start_training=64", "td3.batch_size=16", "td3.hidden_sizes=[16, 16]"]),
    "redq": ("redq", "Pendulum-v1", ["redq.start_training=64", "redq.batch_size=16", "redq.hidden_sizes=[16, 16]",
                                     "redq.updates_per_step=2", "redq.policy_delay=2"]),
    "crossq": ("crossq", "Pendulum-v1", ["crossq.start_training=64", "crossq.batch_size=16",
                                         "crossq.hidden_sizes=[16, 16]", "crossq.critic_hidden_sizes=[16, 16]"]),
    "ppo-image": ("ppo", IMAGES, [f"ppo.{s}" for s in ON_POLICY]),
    "ppo-recurrent": ("ppo", "CartPole-v1", [f"ppo.{s}" for s in ON_POLICY] + ["ppo.recurrent=lstm", "ppo.seq_len=8"]),
    "ppo-masked": ("ppo", MASKED, [f"ppo.{s}" for s in ON_POLICY] + ["env.kwargs={nvec: [3, 4]}"]),
    "appo-masked": ("appo", MASKED, [f"appo.{s}" for s in ON_POLICY]),
    "a2c-recurrent": ("a2c", "CartPole-v1", ["a2c.num_steps=16", "a2c.hidden_sizes=[16]", "a2c.recurrent=gru"]),
    "pqn-image": ("pqn", IMAGES, ["pqn.num_steps=16", "pqn.epochs=1", "pqn.hidden_sizes=[16]"]),
    "pqn-masked": ("pqn", MASKED, ["pqn.num_steps=16", "pqn.epochs=1", "pqn.hidden_sizes=[16]"]),
}


@pytest.mark.parametrize("device", ["auto"] + (["cuda"] if CUDA else []))
@pytest.mark.parametrize("case", list(TRAINS))
def test_trains_on_the_resolved_device(tmp_path, case, device):
    algo, env, sets = TRAINS[case]
    config = build_config(algo, None, [*SMALL, f"env.id={env}", "env.manager=sync", *sets, f"device={device}"],
                          {"total_steps": 160, "seed": 0})
    before = MaskedChoiceEnv.forbidden_taken
    summary = launch.run(config, run_dir=tmp_path / "run", quiet=True, tensorboard=False)
    assert summary["stop_reason"] == "total_steps" and summary["updates"] > 0
    assert summary["last_eval_return"] is not None
    assert MaskedChoiceEnv.forbidden_taken == before  # the masks reached the policy wherever it acts


@pytest.mark.parametrize("algo", ["dqn", "sac", "crossq", "ppo", "appo", "td3", "redq", "a2c", "pqn"])
def test_published_weights_are_cpu_tensors_wherever_the_learner_is(algo):
    obs = gym.spaces.Box(-1, 1, (3,), np.float32)
    act = gym.spaces.Discrete(2) if algo in ("dqn", "ppo", "appo", "a2c", "pqn") else gym.spaces.Box(-1, 1, (1,))
    entry = get_algo(algo)
    learner = entry.algo_cls(getattr(build_config(algo), algo), obs, act, 2)  # (pqn refuses a single env)
    device = resolve_device("auto", learner.devices, algo)
    learner.to(device)
    if not entry.on_policy:  # one update on the device
        n = 8
        batch = {"obs": np.zeros((n, 3), np.float32), "next_obs": np.ones((n, 3), np.float32),
                 "action": np.zeros(n, np.int64) if algo == "dqn" else np.zeros((n, 1), np.float32),
                 "reward": np.ones(n, np.float32), "terminated": np.zeros(n, bool),
                 "discount": np.full(n, 0.99, np.float32)}
        learner.learn(batch)
        assert learner.pop_priorities().shape == (n,)  # back on the CPU as numpy
    weights = learner.policy.get_weights()
    tensors = [v for part in weights.values() if isinstance(part, dict) for v in part.values()]
    assert tensors and all(t.device.type == "cpu" for t in tensors)
    state = flat_tensors(learner.state_dict())  # checkpoints too: networks, targets, optimiser state
    assert state and all(t.device.type == "cpu" for t in state.values())
    if not entry.on_policy:  # (after an update: the optimiser has state)
        assert any("optim" in key for key in state)
    assert learner.policy.act(np.zeros((2, 3), np.float32), "eval").action.shape[0] == 2


def test_batches_move_as_stored_and_are_cast_on_the_device():
    images = np.arange(24, dtype=np.uint8).reshape(2, 3, 4)
    moved = to_tensor(images, torch.device("meta"))  # any device but the CPU takes this path
    assert moved.device.type == "meta" and moved.dtype == torch.float32 and moved.shape == (2, 3, 4)
    assert to_tensor(images, torch.device("cpu")).equal(torch.from_numpy(images.astype(np.float32)))


# ---- PPO's and APPO's learn path on a device that is not the CPU, on any machine
@pytest.fixture
def stand_in_device(monkeypatch):
    """The meta device as a stand-in for CUDA: its tensors have shapes but no values, and an op mixing them with
    CPU tensors fails as it does on CUDA ("Tensor on device cpu is not on the expected device meta!"). What
    leaves the device comes back as zeros (``.cpu()``, ``.item()``, ``bool``); a ``.numpy()`` without ``.cpu()``
    still fails. Boolean masks are taken as all True (their values are unknown), so the rollouts below end no
    episode and fit in one sequence."""
    fx_config = pytest.importorskip("torch.fx.experimental._config")
    if not hasattr(fx_config, "meta_nonzero_assume_all_nonzero"):
        pytest.skip("this torch cannot index with boolean masks on the meta device")
    monkeypatch.setattr(fx_config, "meta_nonzero_assume_all_nonzero", True)
    cpu, item, truth = torch.Tensor.cpu, torch.Tensor.item, torch.Tensor.__bool__
    monkeypatch.setattr(torch.Tensor, "cpu", lambda t, *a, **k: torch.zeros(t.shape, dtype=t.dtype)
                        if t.is_meta else cpu(t, *a, **k))
    monkeypatch.setattr(torch.Tensor, "item", lambda t: 0.0 if t.is_meta else item(t))
    monkeypatch.setattr(torch.Tensor, "__bool__", lambda t: True if t.is_meta else truth(t))
    return torch.device("meta")


BOX, IMAGE = gym.spaces.Box(-1, 1, (3,), np.float32), gym.spaces.Box(0, 255, (12, 12, 2), np.uint8)
CONTINUOUS = gym.spaces.Box(-1, 1, (2,), np.float32)
MIRROR = ["mirror=1", "mirror_critic=true"]  # with a spec swapping the last two observations and the two actions
LEARNERS = {  # algo, observation space, action space, settings, action masks
    "ppo-image-masked": ("ppo", IMAGE, gym.spaces.Discrete(3), [], True),
    "ppo-multidiscrete-masked": ("ppo", BOX, gym.spaces.MultiDiscrete([2, 3]), [], True),
    "ppo-one-hot": ("ppo", gym.spaces.Discrete(5), gym.spaces.Discrete(2), [], False),
    "ppo-mirror-obs-norm": ("ppo", BOX, CONTINUOUS, [*MIRROR, "obs_norm=true"], False),
    "ppo-lstm-mirror-masked": ("ppo", BOX, gym.spaces.Discrete(2), ["recurrent=lstm", *MIRROR], True),
    "ppo-gru-image-shared": ("ppo", IMAGE, CONTINUOUS, ["recurrent=gru", "shared_trunk=true"], False),
    "appo-masked": ("appo", BOX, gym.spaces.Discrete(2), [], True),
    "appo-image": ("appo", IMAGE, CONTINUOUS, [], False),
}


def on_policy_learner(case, tmp_path):
    algo, obs_space, act_space, sets, _ = LEARNERS[case]
    spec = tmp_path / "mirror.yaml"
    spec.write_text("obs: [0.1, 2, 1]\nact: [1, 0.1]\n")
    sets = ["batch_size=16", "seq_len=16", "epochs=1", f"mirror_spec={spec}", *sets]
    cfg = getattr(build_config(algo, None, [f"{algo}.{s}" for s in sets]), algo)
    learner = get_algo(algo).algo_cls(cfg, obs_space, act_space, 4)
    learner.bind_env("Toy-v0")
    return learner


def rollout_of(learner, masked, T=8, N=4):
    """A [T, N] rollout that ends no episode, from the policy's own actions."""
    policy, rng = learner.policy, np.random.default_rng(0)
    obs = np.stack([policy.observation_space.sample() for _ in range(T * N)]).reshape(T, N, *policy.obs_shape)
    action = np.zeros((T, N, *policy.action_shape), policy.action_dtype)
    rollout = {"obs": obs.astype(policy.obs_dtype), "action": action, "logp": np.full((T, N), -0.7, np.float32),
               "value": rng.normal(size=(T, N)).astype(np.float32), "reward": np.ones((T, N), np.float32),
               "next_value": rng.normal(size=(T, N)).astype(np.float32),
               "terminated": np.zeros((T, N), bool), "truncated": np.zeros((T, N), bool)}
    if masked:
        rollout["action_mask"] = np.ones((T, N, policy.act_dim), bool)
    if policy.recurrent:
        rollout["hidden"] = np.zeros((T, N, policy.state_size), np.float32)
    return rollout


@pytest.mark.filterwarnings("ignore:.*to a meta parameter")  # (loading values onto the meta device keeps none)
@pytest.mark.parametrize("case", list(LEARNERS))
def test_the_on_policy_learn_path_keeps_every_tensor_on_the_learners_device(tmp_path, stand_in_device, case):
    """Acting (collect, eval, values, predict, hidden states), learn() and a checkpoint round trip with the learner
    on a device that is not the CPU: no CPU tensor meets a device tensor, and what leaves is on the CPU."""
    masked = LEARNERS[case][4]
    trained = on_policy_learner(case, tmp_path)  # a CPU checkpoint with optimiser state ...
    trained.learn(rollout_of(trained, masked))
    learner = on_policy_learner(case, tmp_path)
    learner.to(stand_in_device)
    assert learner.learn(rollout_of(learner, masked))["updates"] > 0  # from fresh optimisers
    learner.load_state_dict(trained.state_dict())  # ... onto the device: parameters and optimiser state move
    moments = [v for optim in (learner.actor_optim, learner.critic_optim) for s in optim.state.values()
               for v in s.values()]
    assert moments and all(v.device == stand_in_device for v in moments)
    policy, rollout = learner.policy, rollout_of(learner, masked)
    obs, mask = rollout["obs"][0], rollout.get("action_mask", [None])[0]
    for mode in ("collect", "eval"):
        out = policy.act(obs, mode, action_mask=mask)
        assert isinstance(out.action, np.ndarray) and out.action.shape == (4, *policy.action_shape)
    assert policy.value(obs).shape == (4,)
    if policy.recurrent:
        policy.reset_hidden("collect", np.zeros(4, bool))
        assert policy.value(obs, np.ones(4, bool)).shape == (4,)
        assert policy.predict(obs, policy.predict(obs)[1])[1].shape == (4, policy.state_size)
    else:
        assert len(policy.predict(obs)) == 4
    metrics = learner.learn(rollout, progress=0.5)
    assert metrics["updates"] > 0
    learner.timing_step()()
    tensors = [t for t in (policy.get_weights()["model"] | flat_tensors(learner.state_dict())).values()]
    assert tensors and all(t.device.type == "cpu" for t in tensors)


def flat_tensors(tree, key=""):
    if isinstance(tree, torch.Tensor):
        return {key: tree}
    items = tree.items() if isinstance(tree, dict) else enumerate(tree) if isinstance(tree, (list, tuple)) else ()
    return {k: t for name, value in items for k, t in flat_tensors(value, f"{key}.{name}").items()}


@pytest.mark.filterwarnings("ignore:.*to a meta parameter")
@pytest.mark.parametrize("algo, obs_space, sets", [
    ("a2c", IMAGE, []), ("a2c", BOX, ["a2c.recurrent=gru"]),
    ("pqn", IMAGE, ["pqn.epochs=1", "pqn.minibatches=2"]), ("pqn", BOX, ["pqn.epochs=1", "pqn.minibatches=2"])],
    ids=["a2c-image", "a2c-gru", "pqn-image", "pqn"])
def test_a2c_and_pqn_learn_paths_keep_every_tensor_on_the_learners_device(stand_in_device, algo, obs_space, sets):
    """A2C's and PQN's acting (collect with masks, eval, values), learn() and checkpoint round trip on a device that
    is not the CPU."""
    def learner():
        built = get_algo(algo).algo_cls(getattr(build_config(algo, None, sets), algo), obs_space,
                                        gym.spaces.Discrete(3), 4)
        built.policy.act_dim = 3  # (rollout_of's mask width)
        built.policy.obs_shape = obs_space.shape
        return built

    trained = learner()
    trained.learn(rollout_of(trained, True))
    moved = learner()
    moved.to(stand_in_device)
    assert moved.learn(rollout_of(moved, True))["updates"] > 0
    moved.load_state_dict(trained.state_dict())
    assert all(v.device == stand_in_device for s in moved.optim.state.values() for v in s.values() if torch.is_tensor(v)
               and v.ndim)
    policy, rollout = moved.policy, rollout_of(moved, True)
    obs = rollout["obs"][0]
    for mode in ("collect", "eval"):
        assert policy.act(obs, mode, action_mask=rollout["action_mask"][0]).action.shape == (4,)
    assert policy.value(obs).shape == (4,)
    assert moved.learn(rollout, progress=0.5)["updates"] > 0
    state = flat_tensors(moved.state_dict())
    assert state and all(t.device.type == "cpu" for t in state.values())
