"""A Dict observation through the relay: a relayrl worker on a Dict env describes the packed space
(envs/space_data.py), a trainer with --remote-env rebuilds it, and rollouts arrive as uint8 rows the
trainer's PPO learns from. Real sockets: a relay in a thread, the worker's loop in a thread."""

from __future__ import annotations

import gymnasium as gym
import msgpack
import numpy as np
import pytest

from relayrl.algos import get_algo
from relayrl.config import build_config
from relayrl.envs import make
from relayrl.envs.packed import PackedDict
from relayrl.envs.space_data import SpaceDataError, space_from_data, space_to_data
from relayrl.net.backend import relay_pool
from relayrl.net.remote_worker import RemoteWorker
from relayrl.testing.relay import running_relay, running_worker

BANDIT = "relayrl.testing.envs:relayrl-test/DictBandit-v0"
T, N = 8, 2


def config(address: str, tmp_path, *sets: str):
    return build_config("ppo", None, ["net.heartbeat_s=0.1", "net.timeout_s=5", "net.connect_timeout_s=10",
                                      f"ppo.num_steps={T}", f"env.num_envs={N}", "ppo.batch_size=16",
                                      f"net.weights_dir={tmp_path / 'weights'}", *sets],
                        {"net.server": address, "env.id": BANDIT})


def test_a_dict_env_trains_through_the_relay_with_uint8_rows(tmp_path):
    with running_relay() as relay:
        source = relay_pool(config(relay.address, tmp_path, "net.remote_env=true"))
        worker = RemoteWorker(config(relay.address, tmp_path, "net.pace_timeout_s=30"), name="w")
        try:
            with running_worker(worker):
                obs_space, act_space = source.backend.await_spaces(timeout=10)
                assert isinstance(obs_space, PackedDict) and obs_space == make(BANDIT).observation_space
                cfg = build_config("ppo", {"ppo": {"num_steps": T, "batch_size": 16, "epochs": 1}}).ppo
                learner = get_algo("ppo").algo_cls(cfg, obs_space, act_space, N)
                source.publish(learner.policy.get_weights(), 1)
                batch, steps = source.pull()
        finally:
            source.close()
    assert steps == T * N
    assert batch["obs"].dtype == np.uint8 and batch["obs"].shape == (T, N, obs_space.nbytes)  # bytes on the wire
    images = obs_space.unpack(batch["obs"])["image"]
    assert images.dtype == np.uint8 and images.max() > 55  # real pixels, unscaled
    assert np.isfinite(learner.learn(batch)["loss/policy"])


def test_the_packed_space_survives_the_wire_and_hostile_descriptions_are_refused():
    space = make(BANDIT).observation_space
    data = space_to_data(space)
    assert data["type"] == "Dict" and [key for key, _ in data["spaces"]] == ["cue", "image", "noise"]
    assert space_from_data(msgpack.unpackb(msgpack.packb(data))) == space  # as a chunk's header carries it
    box = {"type": "Box", "dtype": "float32", "shape": [1], "low": 0, "high": 1}
    deep = box
    for _ in range(5):
        deep = {"type": "Tuple", "spaces": [deep]}
    bad = [({"type": "Dict", "spaces": []}, "non-empty list"),
           ({"type": "Dict", "spaces": [["a", box], ["a", box]]}, "key 'a' twice"),
           ({"type": "Dict", "spaces": [[1, box]]}, "a key of 1 to 64 characters"),
           ({"type": "Tuple", "spaces": [box] * 65}, "more than 64 keys"),
           (deep, "nested deeper than 4 levels"),
           ({"type": "Dict", "spaces": [["t", {"type": "Text"}]]}, "unknown space type 'Text'")]
    for description, says in bad:
        with pytest.raises(SpaceDataError, match=says):
            space_from_data(description)


def test_a_space_with_non_string_keys_cannot_be_described():
    from relayrl.errors import EnvError

    with pytest.raises(EnvError, match="keys \\[1\\] that are not strings"):
        space_to_data(PackedDict(gym.spaces.Dict({1: gym.spaces.Discrete(2)})))
