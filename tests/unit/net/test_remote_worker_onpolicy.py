"""On-policy learning through the relay, the workers' side: a RemoteWorker for PPO collects nothing
before it holds the weights of the trainer's run (not ones it saved in an earlier run), then exactly one rollout per version (again after
net.pace_timeout_s without new weights); for APPO it collects continuously with at most
net.rollouts_in_flight rollouts unacknowledged. Every chunk describes the env's spaces and, with
obs_norm, the moments of the observations acted on. Real sockets: a relay in a thread, the trainer
a RelayClient (or the relay pool), the worker's loop in a thread (testing/relay.py's running_worker)."""

from __future__ import annotations

import json
import threading
import time

import gymnasium as gym
import numpy as np
import pytest

from relayrl.algos import get_algo
from relayrl.config import build_config
from relayrl.errors import ConfigError, RelayRLError
from relayrl.net import wire
from relayrl.net.client import RelayClient
from relayrl.envs.space_data import space_from_data, space_to_data
from relayrl.net.backend import relay_pool
from relayrl.net.remote_worker import LATEST, RemoteWorker
from relayrl.testing.relay import running_relay, running_worker

T, N = 8, 2
ENV = gym.make("CartPole-v1")


def worker_config(algo: str, address: str, tmp_path, *sets: str):
    return build_config(algo, None, ["net.heartbeat_s=0.1", "net.timeout_s=5", f"{algo}.num_steps={T}",
                                     f"env.num_envs={N}", f"net.weights_dir={tmp_path / 'weights'}", *sets],
                        {"net.server": address, "env.id": "CartPole-v1"})


def weights(algo: str = "ppo", *sets: str) -> bytes:
    cfg = build_config(algo, None, list(sets), {"env.id": "CartPole-v1"}).algo_config
    return wire.weights_to_bytes(get_algo(algo).build_policy(cfg, ENV.observation_space, ENV.action_space)
                                 .get_weights())


@pytest.fixture
def relay():
    with running_relay() as r:
        yield r


@pytest.fixture
def trainer(relay):
    client = RelayClient(relay.address, "trainer", heartbeat_s=0.1, timeout_s=5)
    assert client.wait_connected(10)
    yield client
    client.close(timeout=0.5)


def receive(trainer: RelayClient, count: int, timeout: float = 10.0) -> list[wire.Message]:
    """The next ``count`` chunks (acknowledged), or fewer if they do not come within ``timeout``."""
    got, deadline = [], time.monotonic() + timeout
    while len(got) < count and time.monotonic() < deadline:
        msgs = trainer.receive(min(0.2, max(0.0, deadline - time.monotonic())))
        if msgs:
            trainer.ack(msgs)
        got.extend(msgs)
    return got


def test_ppo_worker_waits_for_weights_then_sends_one_rollout_per_version(relay, trainer, tmp_path):
    worker = RemoteWorker(worker_config("ppo", relay.address, tmp_path, "net.pace_timeout_s=30"), name="w")
    with running_worker(worker):
        announcement = receive(trainer, 1)
        assert len(announcement) == 1 and not announcement[0].arrays and announcement[0].version == -1
        spaces = announcement[0].meta["spaces"]
        assert space_from_data(spaces["observation"]) == ENV.observation_space
        assert space_from_data(spaces["action"]) == ENV.action_space
        assert receive(trainer, 1, timeout=0.5) == [] and worker.env_steps == 0  # nothing without weights
        for version in (5, 6):
            trainer.publish_weights(version, weights())
            [msg] = receive(trainer, 1)
            assert msg.version == version and msg.arrays["reward"].shape == (T, N)
            assert msg.meta["env_steps"] == T * N and msg.meta["spaces"] == spaces
            assert "obs_moments" not in msg.meta  # (no obs_norm)
            assert receive(trainer, 1, timeout=0.5) == []  # one rollout per version
        assert worker.env_steps == 2 * T * N and worker.pace_timeouts == 0


def test_ppo_worker_collects_again_with_the_same_version_when_no_weights_come(relay, trainer, tmp_path, capsys):
    """A lost broadcast must not deadlock trainer and worker: after net.pace_timeout_s the worker
    collects another rollout with the weights it has (the trainer drops it if it has one)."""
    worker = RemoteWorker(worker_config("ppo", relay.address, tmp_path, "net.pace_timeout_s=0.5"), name="w")
    with running_worker(worker):
        receive(trainer, 1)  # the announcement
        trainer.publish_weights(2, weights())
        msgs = receive(trainer, 3, timeout=10)
        assert [m.version for m in msgs] == [2, 2, 2]
        assert worker.pace_timeouts >= 2
    assert "no new weights for 0.5 s after the rollout of version 2" in capsys.readouterr().err


def test_appo_worker_keeps_at_most_rollouts_in_flight_unacknowledged(relay, trainer, tmp_path):
    worker = RemoteWorker(worker_config("appo", relay.address, tmp_path, "net.rollouts_in_flight=2"), name="w")
    with running_worker(worker):
        receive(trainer, 1)  # the announcement
        trainer.publish_weights(0, weights("appo"))
        held = take(trainer, 2)  # taken, not acknowledged (the trainer is busy learning)
        time.sleep(0.5)
        held.extend(trainer.receive(0.0))
        assert len(held) == 2 and worker.env_steps == 2 * T * N  # it waits for the trainer
        trainer.ack(held)
        more = take(trainer, 2)
        time.sleep(0.5)
        more.extend(trainer.receive(0.0))
        assert len(more) == 2 and all(m.version == 0 and m.arrays["reward"].shape == (T, N) for m in more)
        assert worker.env_steps == 4 * T * N


def take(trainer: RelayClient, count: int, timeout: float = 10.0) -> list[wire.Message]:
    """The next ``count`` chunks, not acknowledged (so a worker holding its in-flight limit sends no more)."""
    got, deadline = [], time.monotonic() + timeout
    while len(got) < count and time.monotonic() < deadline:
        got.extend(trainer.receive(0.2))
    return got


def test_saved_weights_of_an_earlier_run_do_not_let_an_on_policy_worker_start(relay, trainer, tmp_path):
    """Weights it saved (of a known version) are an earlier run's: the worker announces its spaces and
    waits for the trainer's before it collects (its rollouts then carry the trainer's version)."""
    folder = tmp_path / "weights"
    folder.mkdir()
    (folder / LATEST).write_bytes(weights())
    worker = RemoteWorker(worker_config("ppo", relay.address, tmp_path), name="w")
    try:
        assert not worker.has_weights  # a weights file without its latest.json: of no known version
    finally:
        worker.close(flush_timeout=0)
    (folder / "latest.json").write_text(json.dumps({"version": 4}))
    worker = RemoteWorker(worker_config("ppo", relay.address, tmp_path, "net.pace_timeout_s=30"), name="w")
    assert worker.has_weights and worker.worker.version == 4
    with running_worker(worker):
        [msg] = receive(trainer, 1)
        assert msg.version == -1 and not msg.arrays  # the announcement, no rollout of the saved weights
        assert receive(trainer, 1, timeout=0.5) == [] and worker.env_steps == 0
        trainer.publish_weights(5, weights())
        [msg] = receive(trainer, 1)
        assert msg.version == 5 and msg.arrays["reward"].shape == (T, N)


def test_with_obs_norm_each_rollout_reports_the_moments_of_its_observations(relay, trainer, tmp_path):
    worker = RemoteWorker(worker_config("ppo", relay.address, tmp_path, "ppo.obs_norm=true",
                                        "net.pace_timeout_s=30"), name="w")
    with running_worker(worker):
        receive(trainer, 1)
        trainer.publish_weights(1, weights("ppo", "ppo.obs_norm=true"))
        [msg] = receive(trainer, 1)
    moments = msg.meta["obs_moments"]
    assert moments["count"] == T * N and len(moments["mean"]) == 4 and min(moments["var"]) > 0
    json.dumps(moments)  # plain data


def test_expert_workers_are_for_off_policy_algorithms(relay, tmp_path):
    with pytest.raises(ConfigError, match="--expert with ppo: an on-policy algorithm learns from its own policy"):
        RemoteWorker(worker_config("ppo", relay.address, tmp_path), expert=True)


def test_a_ppo_worker_on_another_num_steps_hears_why_its_rollouts_are_refused(relay, tmp_path, capsys):
    trainer_cfg = build_config("ppo", None, ["net.heartbeat_s=0.1", "net.timeout_s=5", "ppo.num_steps=16",
                                             f"env.num_envs={N}"], {"net.server": relay.address})
    source = relay_pool(trainer_cfg, ENV.observation_space, ENV.action_space)
    source.reset(0)
    source.publish(wire.weights_from_bytes(weights()), 0)
    puller = threading.Thread(target=lambda: pytest.raises(RelayRLError, source.pull), daemon=True)
    puller.start()
    worker = RemoteWorker(worker_config("ppo", relay.address, tmp_path, "net.pace_timeout_s=30"), name="lost")
    try:
        with running_worker(worker):
            deadline = time.monotonic() + 10
            while not worker.client.chunk_refusals and time.monotonic() < deadline:
                time.sleep(0.05)
    finally:
        source.close()
        puller.join(timeout=10)
    assert worker.client.chunk_refusals == {"shape": 1} and source.backend.refused == {"shape": 1}
    told = [line for line in capsys.readouterr().err.splitlines() if line.startswith("relayrl worker lost:")]
    assert len(told) == 1 and "was refused (shape)" in told[0], told
    assert "a rollout of 8 steps x 2 envs, the trainer's is 16 x 2" in told[0]
    assert "run the worker with the trainer's --set ppo.num_steps=16 --set env.num_envs=2" in told[0]


def test_the_spaces_cost_a_chunk_little():
    """Measured: a default PPO rollout of CartPole-v1 (64 steps x 8 envs) is 21.7 KB on the wire; the
    spaces that every chunk carries add 149 bytes (0.7%), and an image space with uniform bounds is
    no larger (its bounds are one number each). The trainer decodes them once per worker."""
    shape = (64, 8)
    batch = {"obs": np.zeros((*shape, 4), np.float32), "action": np.zeros(shape, np.int64),
             **{k: np.zeros(shape, np.float32) for k in ("logp", "value", "reward", "next_value")},
             "terminated": np.zeros(shape, bool), "truncated": np.zeros(shape, bool)}
    spaces = {"observation": space_to_data(ENV.observation_space), "action": space_to_data(ENV.action_space)}

    def size(meta):
        return sum(len(f) for f in wire.encode(wire.SAMPLES, arrays=batch, meta={"env_steps": 512, **meta}))

    extra = size({"spaces": spaces}) - size({})
    assert extra < 200 and extra / size({}) < 0.01, (extra, size({}))
    image = {"observation": space_to_data(gym.spaces.Box(0, 255, (84, 84, 3), np.uint8)),
             "action": space_to_data(gym.spaces.Discrete(6))}
    assert len(wire.encode(wire.SAMPLES, meta={"spaces": image})[0]) < 200
