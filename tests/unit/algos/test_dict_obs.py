"""Dict observations: one encoder per key (policy/encoders.py: DictEncoder), packed into one uint8 row at
the env boundary (envs/packed.py) so rollouts and replay hold uint8. PPO learns a task that needs both an
image key and a vector key; PPO (feed-forward and recurrent), APPO, DQN and SAC train on Dicts inline and
with subproc envs; the loaded policy predicts from a raw Dict; your encoder gets the Dict; refusals."""

from __future__ import annotations

import subprocess
import sys
import uuid

import gymnasium as gym
import numpy as np
import pytest
import torch

import relayrl
from relayrl.algos import get_algo
from relayrl.config import build_config
from relayrl.envs import make, make_vec
from relayrl.envs.packed import PackedDict
from relayrl.errors import ConfigError, EnvError
from relayrl.policy.encoders import DictEncoder, OneHot, SmallCNN
from relayrl.training.collector import OnPolicyCollector

BANDIT = "relayrl.testing.envs:relayrl-test/DictBandit-v0"  # image uint8 + cue float32 + noise Discrete


def test_ppo_learns_a_task_that_needs_both_keys_and_the_loaded_policy_predicts_from_a_raw_dict(tmp_path):
    config = {"env": {"num_envs": 8, "manager": "sync"},
              "ppo": {"num_steps": 16, "batch_size": 64, "epochs": 4, "hidden_sizes": [64], "actor_lr": 1e-3,
                      "critic_lr": 1e-3},
              "eval": {"freq": 512, "episodes": 40, "num_envs": 4}, "threads": 1}
    torch.manual_seed(0)
    run = relayrl.train("ppo", BANDIT, config, total_steps=4096, stop_value=0.95, seed=0, run_dir=tmp_path / "run",
                        tensorboard=False)
    assert run.summary["best_eval_return"] >= 0.95, run.summary
    policy = relayrl.load(run.run_dir)  # (the env made again by id: packed again)
    assert isinstance(policy.observation_space, PackedDict)
    encoder = policy.model.actor_encoder.encoder
    assert isinstance(encoder, DictEncoder) and isinstance(encoder.parts[1], SmallCNN)
    assert isinstance(encoder.parts[2], OneHot)
    env = make(BANDIT, pack_dict=False)
    right = {True: 0, False: 0}
    for seed in range(40):
        obs, info = env.reset(seed=seed)
        assert isinstance(obs, dict) and obs["image"].dtype == np.uint8
        right[env.unwrapped.shown] += int(policy.predict(obs)) == info["arm"]  # a raw Dict, as the env gives it
    shown = sum(1 for seed in range(40) if (env.reset(seed=seed), env.unwrapped.shown)[1])
    assert right[True] == shown and right[False] == 40 - shown  # the picture read when shown, the cue otherwise
    batch = {k: np.stack([env.reset(seed=s)[0][k] for s in range(3)]) for k in ("cue", "image", "noise")}
    assert policy.predict(batch).shape == (3,)  # a batch of Dicts: each key with a leading axis


ON_POLICY = [("ppo", {}), ("ppo", {"recurrent": "gru", "seq_len": 8, "batch_trajectories": 2}), ("appo", {}),
             ("a2c", {})]


@pytest.mark.parametrize("algo, options", ON_POLICY, ids=["ppo", "ppo-gru", "appo", "a2c"])
@pytest.mark.parametrize("manager", ["sync", "subproc"])
def test_on_policy_algorithms_collect_uint8_dict_rows_and_a_learning_step_trains_every_key_s_encoder(
        algo, options, manager):
    if manager == "subproc" and algo != "ppo":
        pytest.skip("one subproc case is enough: the manager carries rows, the algorithm does not see it")
    torch.manual_seed(0)
    sizes = {} if algo == "a2c" else {"batch_size": 16, "epochs": 1}  # (a2c: one step on the whole rollout)
    cfg = getattr(build_config(algo, {algo: {"num_steps": 16, **sizes, **options}}), algo)
    with make_vec(BANDIT, 2, manager=manager, **({"workers": 2} if manager == "subproc" else {})) as venv:
        space = venv.single_observation_space
        learner = get_algo(algo).algo_cls(cfg, space, venv.single_action_space, 2)
        collector = OnPolicyCollector(venv, learner.policy, 16)
        collector.reset(seed=0)
        rollout = collector.collect()
    assert rollout["obs"].dtype == np.uint8 and rollout["obs"].shape == (16, 2, space.nbytes)  # uint8 in the rollout
    model = learner.policy.model
    cnn = model.actor_encoder.encoder.parts[1]
    before = [p.detach().clone() for p in cnn.parameters()]
    metrics = learner.learn(rollout)
    assert np.isfinite(metrics["loss/policy"])
    assert any(not torch.equal(p, q) for p, q in zip(cnn.parameters(), before))


@pytest.mark.parametrize("algo, manager", [("dqn", "subproc"), ("sac", "sync"), ("crossq", "sync")])
def test_off_policy_algorithms_train_on_a_dict_env(tmp_path, algo, manager):
    env = {"num_envs": 2, "manager": manager, **({"workers": 2} if manager == "subproc" else {})}
    if algo in ("sac", "crossq"):
        env["kwargs"] = {"actions": "box"}
    critic = {"critic_hidden_sizes": [32]} if algo == "crossq" else {}
    config = {"env": env, algo: {"start_training": 64, "batch_size": 32, "hidden_sizes": [32], **critic},
              "eval": {"freq": 0, "episodes": 4, "num_envs": 2}, "threads": 1}
    run = relayrl.train(algo, BANDIT, config, total_steps=256, seed=0, run_dir=tmp_path / "run", tensorboard=False)
    assert run.summary["updates"] > 0 and run.summary["last_eval_return"] is not None
    policy = relayrl.load(run.run_dir)
    obs, _ = make(BANDIT, pack_dict=False, **env.get("kwargs", {})).reset(seed=0)
    assert np.shape(policy.predict(obs)) == (() if algo == "dqn" else (1,))


def test_off_policy_learning_reads_uint8_rows_and_trains_the_encoder():
    env = make(BANDIT)
    space = env.observation_space
    learner = get_algo("dqn").algo_cls(build_config("dqn", {"dqn": {"hidden_sizes": [16]}}).dqn, space,
                                       env.action_space, 1)
    rows = np.stack([env.reset(seed=s)[0] for s in range(16)])
    assert rows.dtype == np.uint8
    batch = {"obs": rows[:8], "next_obs": rows[8:], "reward": np.ones(8, np.float32), "action": np.zeros(8, np.int64),
             "terminated": np.ones(8, np.float32), "discount": np.full(8, 0.99, np.float32)}
    before = [p.detach().clone() for p in learner.policy.model.encoder.parameters()]
    learner.learn(batch)
    assert any(not torch.equal(p, q) for p, q in zip(learner.policy.model.encoder.parameters(), before))


NETS = '''
import torch
from torch import nn

SEEN = []

class Reads(nn.Module):
    def __init__(self, space):
        super().__init__()
        self.space = space
        self.linear = nn.Linear(2 + 6 * 6 + 1, 8)

    def forward(self, obs):
        SEEN.append(obs)
        return self.linear(torch.cat([obs["cue"], obs["image"].mean(-1).flatten(1) / 255, obs["noise"][:, None]], 1))

def dict_net(observation_space, action_space):
    return Reads(observation_space)
'''


def test_your_encoder_gets_the_dict_space_and_a_dict_of_float32_tensors(tmp_path, monkeypatch):
    name = f"dict_nets_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text(NETS)
    monkeypatch.syspath_prepend(str(tmp_path))
    env = make(BANDIT)
    cfg = build_config("ppo", {"ppo": {"encoder": f"{name}:dict_net"}}).ppo
    policy = get_algo("ppo").build_policy(cfg, env.observation_space, env.action_space)
    module = sys.modules[name]
    assert policy.model.actor_encoder.encoder.space == env.observation_space.space  # the Dict, not the bytes
    raw = make(BANDIT, pack_dict=False).reset(seed=1)[0]
    module.SEEN.clear()
    policy.predict(raw)
    seen = module.SEEN[-1]
    assert set(seen) == {"cue", "image", "noise"} and all(v.dtype == torch.float32 for v in seen.values())
    np.testing.assert_array_equal(seen["image"][0].numpy(), raw["image"])  # pixels 0..255, exact
    np.testing.assert_array_equal(seen["cue"][0].numpy(), raw["cue"])
    assert seen["noise"][0].item() == raw["noise"]
    sys.modules.pop(name, None)


def test_a_key_no_encoder_takes_is_refused_naming_the_key_and_the_fix():
    env = make(BANDIT, grid=True)
    with pytest.raises(EnvError) as caught:
        get_algo("ppo").build_policy(build_config("ppo").ppo, env.observation_space, env.action_space)
    message = str(caught.value)
    assert "\n" not in message and message.startswith("observation space Dict(")
    for part in ("key 'grid' has no built-in encoder", "Box(-1.0, 1.0, (3, 4), float32)", "one encoder per key",
                 "FilterObservation", 'give ppo.encoder: "package.module:function"'):
        assert part in message


def test_relayrl_train_exits_2_on_such_a_key_before_writing_anything(tmp_path):
    result = subprocess.run([sys.executable, "-m", "relayrl", "train", "dqn", "--env", BANDIT, "--set",
                             "env.kwargs={grid: true}", "--run-dir", str(tmp_path / "run"), "--total-steps", "64"],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 2, result.stderr
    assert "key 'grid' has no built-in encoder" in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "run").exists()


def test_obs_norm_and_the_mirror_loss_are_refused_with_a_dict():
    env = make(BANDIT)
    with pytest.raises(ConfigError, match=r"ppo.obs_norm=true normalises observations as one vector, but Dict\(.*"
                                          r"set ppo.obs_norm=false"):
        get_algo("ppo").build_policy(build_config("ppo", {"ppo": {"obs_norm": True}}).ppo, env.observation_space,
                                     env.action_space)
    algo = get_algo("ppo").algo_cls(build_config("ppo", {"ppo": {"mirror": 1.0}}).ppo, env.observation_space,
                                    env.action_space, 1)
    with pytest.raises(ConfigError, match="ppo.mirror reflects observation vectors"):
        algo.bind_env(BANDIT)


def test_an_unpacked_dict_policy_space_is_refused_naming_the_fix():
    with pytest.raises(EnvError, match="make the env with relayrl.envs.make, or wrap it in relayrl.envs.packed"):
        get_algo("sac").build_policy(build_config("sac").sac, make(BANDIT, pack_dict=False).observation_space,
                                     gym.spaces.Box(-1, 1, (1,)))
