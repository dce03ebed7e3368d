"""Privileged critic inputs (``ppo.critic_only_keys``: policy/privileged.py): the actor never reads the named
keys of a Dict observation, the critic does; predict works without them; what cannot work is refused."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from relayrl.algos import get_algo
from relayrl.config import build_config
from relayrl.envs import make
from relayrl.errors import ConfigError, EnvError

NOISY = "relayrl.testing.envs:relayrl-test/NoisyPendulum-v0"  # {"obs": noisy, "state": clean}


def build(algo: str = "ppo", *sets: str, obs_space: gym.Space | None = None):
    env = make(NOISY)
    cfg = getattr(build_config(algo, None, list(sets)), algo)
    torch.manual_seed(0)
    return get_algo(algo).algo_cls(cfg, obs_space or env.observation_space, env.action_space, 2), env


def observations(n: int = 5, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"obs": rng.normal(size=(n, 3)).astype(np.float32), "state": rng.normal(size=(n, 3)).astype(np.float32)}


@pytest.mark.parametrize("algo", ["ppo", "appo", "a2c"])
def test_the_actor_ignores_the_privileged_key_and_the_critic_reads_it(algo):
    learner, env = build(algo, f"{algo}.critic_only_keys=[state]")
    policy, space = learner.policy, env.observation_space
    first = observations()
    other = {"obs": first["obs"], "state": first["state"] + 3.0}  # only the privileged key differs
    a, b = (policy.act(space.pack(o), "collect") for o in (first, other))
    rows = [torch.as_tensor(space.pack(o), dtype=torch.float32) for o in (first, other)]
    with torch.no_grad():
        torch.testing.assert_close(policy.model.actor(rows[0]), policy.model.actor(rows[1]), rtol=0, atol=0)
        assert not torch.allclose(policy.model.critic(rows[0]), policy.model.critic(rows[1]))
    assert not np.allclose(a.value, b.value)
    np.testing.assert_array_equal(policy.act(space.pack(first), "eval").action,
                                  policy.act(space.pack(other), "eval").action)
    # ... while a change of the actor's own key changes the action
    moved = {"obs": first["obs"] + 1.0, "state": first["state"]}
    assert not np.allclose(policy.act(space.pack(moved), "eval").action, policy.act(space.pack(first), "eval").action)


def test_the_actor_has_only_the_other_keys_as_input():
    learner, _ = build("ppo", "ppo.critic_only_keys=[state]")
    model = learner.policy.model
    assert model.actor_encoder.features == 3 and [f.name for f in model.actor_encoder.fields] == ["obs"]
    assert not model.shared and model.critic_encoder.encoder.features == 6  # the critic: obs and state
    assert model.actor_head[0].in_features == 3 and model.critic_head[0].in_features == 6


def test_predict_needs_only_the_actors_keys():
    learner, _ = build("ppo", "ppo.critic_only_keys=[state]")
    policy = learner.policy
    batch = observations()
    full = policy.predict(batch)
    np.testing.assert_array_equal(policy.predict({"obs": batch["obs"]}), full)  # a batch without the key
    single = policy.predict({"obs": batch["obs"][0]})  # one observation without the key
    assert single.shape == (1,)
    np.testing.assert_allclose(single, full[0], rtol=1e-5)  # (a batch of 1 rounds differently)


@pytest.mark.parametrize("sets, error, words", [
    (["ppo.critic_only_keys=[velocity]"], EnvError, ["'velocity'", "'obs', 'state'"]),
    (["ppo.critic_only_keys=[obs,state]"], ConfigError, ["actor", "would then see nothing"]),
    (["ppo.critic_only_keys=[state]", "ppo.obs_norm=true"], ConfigError, ["ppo.obs_norm=false"]),
    (["ppo.critic_only_keys=[state]", "ppo.shared_trunk=true"], ConfigError, ["ppo.shared_trunk=false"]),
    (["ppo.critic_only_keys=[state]", "ppo.recurrent=gru"], ConfigError, ["ppo.recurrent=null"]),
    (["ppo.critic_only_keys=[state]", "ppo.encoder=relayrl.policy.encoders:auto"], ConfigError, ["ppo.encoder=null"]),
])
def test_what_cannot_give_an_actor_without_the_keys_is_refused(sets, error, words):
    with pytest.raises(error) as caught:
        build("ppo", *sets)
    message = str(caught.value)
    assert all(word in message for word in words), message


def test_a_non_dict_observation_with_the_option_is_refused():
    with pytest.raises(EnvError, match=r"critic_only_keys=\['state'\] names keys of a Dict observation.*"
                                       r"ppo.critic_only_keys=\[\]"):
        build("ppo", "ppo.critic_only_keys=[state]", obs_space=gym.spaces.Box(-1, 1, (6,), np.float32))


def test_appo_names_its_own_option():
    with pytest.raises(EnvError, match=r"appo.critic_only_keys"):
        build("appo", "appo.critic_only_keys=[velocity]")



def test_an_exported_dict_of_uint8_keys_lists_the_unread_key_and_acts_without_its_bytes(tmp_path):
    import json

    onnxruntime = pytest.importorskip("onnxruntime")
    from relayrl.envs.packed import PackedDict
    from relayrl.export import export_policy

    space = PackedDict(gym.spaces.Dict({"camera": gym.spaces.Box(0, 255, (6, 6, 1), np.uint8),
                                        "state": gym.spaces.Box(0, 255, (4,), np.uint8)}))
    cfg = build_config("ppo", None, ["ppo.critic_only_keys=[state]"]).ppo
    torch.manual_seed(0)
    policy = get_algo("ppo").build_policy(cfg, space, gym.spaces.Discrete(3))
    exported = export_policy(policy, tmp_path / "policy.onnx", "onnx")
    assert json.loads(exported.sidecar.read_text())["unread_fields"] == ["state"]
    rng = np.random.default_rng(0)
    camera = rng.integers(0, 256, (8, 6, 6, 1), dtype=np.uint8)
    rows = space.pack({"camera": camera, "state": np.zeros((8, 4), np.uint8)})  # zeros where the state goes
    session = onnxruntime.InferenceSession(str(exported.path), providers=["CPUExecutionProvider"])
    np.testing.assert_array_equal(session.run(None, {"obs": rows})[0], policy.predict({"camera": camera}))
    rows[:, -4:] = rng.integers(0, 256, (8, 4), dtype=np.uint8)  # other state bytes: the same actions
    np.testing.assert_array_equal(session.run(None, {"obs": rows})[0], policy.predict({"camera": camera}))
