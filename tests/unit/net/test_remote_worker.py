"""``relayrl worker``'s RemoteWorker: weights from the relay, persisted and reloaded; modes; pacing."""

from __future__ import annotations

import sys
import threading
import time
import types

import numpy as np
import pytest
import torch

from relayrl.algos import get_algo
from relayrl.config import build_config
from relayrl.envs.realtime import RealTimeWarning
from relayrl.envs.registry import make
from relayrl.errors import CheckpointError, RelayRLError
from relayrl.net import wire
from relayrl.net.client import RelayClient
from relayrl.net.compress import ActionBufferCompressor
from relayrl.net.backend import relay_pool
from relayrl.net.remote_worker import RemoteWorker
from relayrl.runtime.pool import WorkerPool
from relayrl.testing.relay import running_relay

FAST = ["net.heartbeat_s=0.1", "net.timeout_s=2", "env.num_envs=1", "sac.steps_per_iteration=8"]
DRONE = "relayrl.envs.realtime:relayrl/RealTimeDrone-v0"


def worker_config(address: str | None, tmp_path, *sets: str, env: str = "Pendulum-v1"):
    return build_config("sac", None, [*FAST, f"net.weights_dir={tmp_path / 'weights'}", *sets],
                        {"env.id": env, "net.server": address})


def trainer_source(address: str, *sets: str, env: str = "Pendulum-v1") -> WorkerPool:
    config = build_config("sac", None, ["net.heartbeat_s=0.1", "net.timeout_s=2", *sets],
                          {"env.id": env, "net.server": address})
    probe = make(env)
    try:
        return relay_pool(config, probe.observation_space, probe.action_space)
    finally:
        probe.close()


def pull_steps(source: WorkerPool, steps: int, timeout: float = 20.0) -> list[dict]:
    """The batches the trainer takes until it has counted ``steps`` env steps."""
    batches, got, deadline = [], 0, time.monotonic() + timeout
    while got < steps and time.monotonic() < deadline:
        batch, n = source.pull()
        got += n
        if batch:
            batches.append(batch)
    assert got == steps, f"the trainer counted {got} env steps, expected {steps}"
    return batches


def trainer_weights(*sets: str, seed: int = 1, env: str = "Pendulum-v1") -> dict:
    """The weights a trainer with these options would publish."""
    torch.manual_seed(seed)
    config = build_config("sac", None, list(sets), {"env.id": env})
    probe = make(env)
    algo = get_algo("sac").algo_cls(config.sac, probe.observation_space, probe.action_space, 1)
    probe.close()
    return algo.policy.get_weights()


def publish(trainer: RelayClient | WorkerPool, env: str = "Pendulum-v1") -> None:
    """What a trainer's run does first: publish its weights (a worker collects only with weights of the
    run of the trainer that is there)."""
    if isinstance(trainer, WorkerPool):
        trainer.publish(trainer_weights(env=env), 0)
    else:
        trainer.publish_weights(0, wire.weights_to_bytes(trainer_weights(env=env)))


def actor_params(worker: RemoteWorker) -> list[np.ndarray]:
    return [p.detach().numpy().copy() for p in worker.worker.policy.actor.parameters()]


@pytest.fixture
def relay():
    with running_relay() as r:
        yield r


def wait_for(condition, timeout=10.0):
    deadline = time.monotonic() + timeout
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.02)
    return condition()


def test_weights_from_the_trainer_are_used_saved_and_reloaded(relay, tmp_path):
    trainer = RelayClient(relay.address, "trainer", heartbeat_s=0.1, timeout_s=2)
    worker = RemoteWorker(worker_config(relay.address, tmp_path, "net.model_history=2"))
    try:
        assert trainer.wait_connected(5) and worker.client.wait_connected(5)
        for version in (1, 2, 3, 4):
            trainer.publish_weights(version, wire.weights_to_bytes(trainer_weights(seed=version)))
            assert wait_for(lambda: worker.client._weights_in is not None)
            worker._take_weights()
        assert worker.worker.version == 4
        expected = [v.numpy() for v in trainer_weights(seed=4)["actor"].values()]
        for got, want in zip(actor_params(worker), expected):
            np.testing.assert_array_equal(got, want)
        saved = tmp_path / "weights"
        assert (saved / "latest.safetensors").is_file()
        assert sorted(p.name for p in (saved / "history").iterdir()) == ["v000000002.safetensors",
                                                                         "v000000004.safetensors"]
    finally:
        worker.close(flush_timeout=0)
        trainer.close()
    again = RemoteWorker(worker_config(relay.address, tmp_path))
    try:
        assert again.worker.version == 4  # a restarted worker acts with the last policy it had
        for got, want in zip(actor_params(again), expected):
            np.testing.assert_array_equal(got, want)
    finally:
        again.close(flush_timeout=0)


def test_expert_workers_send_samples_but_never_load_weights(relay, tmp_path):
    trainer = RelayClient(relay.address, "trainer", heartbeat_s=0.1, timeout_s=2)
    worker = RemoteWorker(worker_config(relay.address, tmp_path), expert=True)
    try:
        before = actor_params(worker)
        assert trainer.wait_connected(5) and worker.client.wait_connected(5)
        trainer.publish_weights(7, wire.weights_to_bytes(trainer_weights()))
        assert wait_for(lambda: worker.client._weights_in is not None)
        worker.run(max_steps=32, log=None)
        assert worker.worker.version != 7
        for got, want in zip(actor_params(worker), before):
            np.testing.assert_array_equal(got, want)
        received = []
        assert wait_for(lambda: received.extend(trainer.receive(0.1)) or len(received) >= 4)
        assert sum(m.meta["env_steps"] for m in received) == 32
    finally:
        worker.close(flush_timeout=0)
        trainer.close()


def test_weights_that_do_not_fit_name_the_fix(relay, tmp_path):
    trainer = RelayClient(relay.address, "trainer", heartbeat_s=0.1, timeout_s=2)
    worker = RemoteWorker(worker_config(relay.address, tmp_path))
    try:
        assert trainer.wait_connected(5) and worker.client.wait_connected(5)
        trainer.publish_weights(1, wire.weights_to_bytes(trainer_weights("sac.hidden_sizes=[32]")))
        assert wait_for(lambda: worker.client._weights_in is not None)
        with pytest.raises(RelayRLError, match="same --config/--set"):
            worker._take_weights()
    finally:
        worker.close(flush_timeout=0)
        trainer.close()


def test_standalone_needs_saved_weights_then_runs_episodes(tmp_path):
    config = worker_config(None, tmp_path, "env.max_episode_steps=20")
    with pytest.raises(CheckpointError, match="--weights"):
        RemoteWorker(config, standalone=True)
    blob = wire.weights_to_bytes(trainer_weights())
    (tmp_path / "w.safetensors").write_bytes(blob)
    worker = RemoteWorker(config, standalone=True, weights=tmp_path / "w.safetensors")
    try:
        returns = worker.run_episodes(2, seed=0)
        assert len(returns) == 2 and all(np.isfinite(returns))
    finally:
        worker.close()


def _run_for(worker: RemoteWorker, seconds: float, env: str = "Pendulum-v1") -> None:
    """The worker's loop for ``seconds``, with a trainer that publishes weights once and takes every chunk."""
    trainer = RelayClient(worker.config.net.server, "trainer", heartbeat_s=0.1, timeout_s=2)
    stop = threading.Event()

    def take() -> None:
        while not stop.is_set():
            trainer.ack(trainer.receive(0.1))

    taker = threading.Thread(target=take, daemon=True)
    try:
        assert trainer.wait_connected(5) and worker.client.wait_connected(5)
        publish(trainer, env)
        taker.start()
        assert wait_for(lambda: worker.client._weights_in is not None and worker.client.trainer_present())
        timer = threading.Timer(seconds, stop.set)
        timer.start()
        worker.run(stop=stop, log=None)
    finally:
        stop.set()
        if taker.is_alive():
            taker.join(timeout=10)
        trainer.close(timeout=0)


def test_pacing_waits_for_new_weights_after_max_steps_per_update(relay, tmp_path):
    worker = RemoteWorker(worker_config(relay.address, tmp_path, "net.max_steps_per_update=40",
                                        "sac.start_training=100", "sac.batch_size=64"))
    try:
        _run_for(worker, 1.5)
        # free until the trainer's warm-up (start_training) is collected, then 40 steps per version at most
        assert 100 <= worker.env_steps < 100 + 8
        assert worker.pace_timeouts == 0
    finally:
        worker.close(flush_timeout=0)


def test_the_warm_up_is_the_trainers_first_full_batch(relay, tmp_path):
    """A trainer learns only once it holds max(start_training, batch_size) samples: a worker paced
    before that would wait for weights that never come."""
    worker = RemoteWorker(worker_config(relay.address, tmp_path, "net.max_steps_per_update=10",
                                        "sac.start_training=50", "sac.batch_size=120"))
    try:
        _run_for(worker, 1.5)
        assert 120 <= worker.env_steps < 120 + 8
    finally:
        worker.close(flush_timeout=0)


def test_a_paced_worker_without_new_weights_collects_on_after_pace_timeout(relay, tmp_path, capsys):
    worker = RemoteWorker(worker_config(relay.address, tmp_path, "net.max_steps_per_update=40",
                                        "sac.start_training=100", "sac.batch_size=64", "net.pace_timeout_s=0.4"))
    try:
        _run_for(worker, 2.0)
        assert worker.pace_timeouts >= 1 and worker.env_steps >= 140
        assert worker.stats()["pace_timeouts"] == worker.pace_timeouts
        assert "update_model_interval" in capsys.readouterr().err
    finally:
        worker.close(flush_timeout=0)


def test_truncated_episodes_and_test_episodes(relay, tmp_path):
    trainer = RelayClient(relay.address, "trainer", heartbeat_s=0.1, timeout_s=2)
    worker = RemoteWorker(worker_config(relay.address, tmp_path, "env.max_episode_steps=10",
                                        "net.test_episode_interval=2"))
    try:
        assert trainer.wait_connected(5) and worker.client.wait_connected(5)
        publish(trainer)
        worker.run(max_steps=40, log=None)
        worker._send_if_ready(force=True)
        received = []
        assert wait_for(lambda: received.extend(trainer.receive(0.1)) or
                        sum(m.meta["env_steps"] for m in received) >= 40)
        received = [m for m in received if m.version >= 0]  # (not the announcement of its spaces, if it made one)
        lengths = [n for m in received for n in m.meta["lengths"]]
        assert lengths == [10, 10, 10, 10]
        assert not any(m.arrays["terminated"].any() for m in received)  # a time limit is not a termination
        assert len([r for m in received for r in m.meta["test_returns"]]) == 2  # reported, not sent as data
        assert sum(len(m.arrays["reward"]) for m in received) == 40
    finally:
        worker.close(flush_timeout=0)
        trainer.close()


def test_a_real_time_env_reports_its_clock_to_the_trainer(relay, tmp_path):
    worker = RemoteWorker(worker_config(relay.address, tmp_path, env=DRONE))
    source = trainer_source(relay.address, env=DRONE)
    act, calls = worker.worker.policy.act, []

    def slow_once(*args, **kwargs):  # one action computed far too slowly: the env must count a late step
        calls.append(1)
        if len(calls) == 5:
            time.sleep(0.3)  # 15 time steps of 20 ms
        return act(*args, **kwargs)

    worker.worker.policy.act = slow_once
    try:
        source.reset(0)
        publish(source, DRONE)
        assert worker.client.wait_connected(5)
        with pytest.warns(RealTimeWarning):
            worker.run(max_steps=16, log=None)
        pull_steps(source, 16)
        stats = source.stats()
        assert stats["net/rt_late_steps"] >= 1 and 0 <= stats["net/rt_jitter_max"] < 1.0
        assert worker.timing()["late_steps"] == stats["net/rt_late_steps"]  # what the worker measured, delivered
    finally:
        worker.close(flush_timeout=0)
        source.close()


def test_a_paced_real_time_worker_holds_its_env_with_the_default_action(relay, tmp_path):
    """While a paced worker waits for weights nothing steps its real-time env, whose device would go on
    under the policy's last action: the worker calls env.wait(), which applies the default action."""
    worker = RemoteWorker(worker_config(relay.address, tmp_path, "net.max_steps_per_update=16", "sac.start_training=16",
                                        "sac.batch_size=16", "net.pace_timeout_s=0.5", env=DRONE))
    drone = worker.worker.venv.envs[0].unwrapped.interface
    holds, hold = [], drone.wait

    def wait():
        before = drone.accel  # the policy's last action, still applied
        hold()
        holds.append((before, drone.accel))

    drone.wait = wait
    try:
        _run_for(worker, 2.5, env=DRONE)
        assert worker.pace_timeouts >= 1
        # once per pause (ended by the timeout, or by weights: a loaded machine's trainer may reconnect and
        # send them again), not once per poll
        assert 1 <= len(holds) <= worker.pace_timeouts + worker.versions_received + 1
        default = float(drone.get_default_action()[0])
        assert all(after == default for _, after in holds)
        assert any(before != default for before, _ in holds)  # it was the policy's action before
    finally:
        worker.close(flush_timeout=0)


def test_a_restarted_worker_process_with_the_same_name_loses_nothing(relay, tmp_path):
    """`relayrl worker --name robot` run twice: the second process's chunks (seqs from 0 again) all
    reach the trainer, none taken for repeats of the first's."""
    source = trainer_source(relay.address)
    source.reset(0)
    publish(source)
    batches, stop = [], threading.Event()

    def trainer():
        while not stop.is_set():
            batch, _ = source.pull()
            if batch:
                batches.append(batch)

    thread = threading.Thread(target=trainer, daemon=True)
    thread.start()
    try:
        for _ in range(2):
            worker = RemoteWorker(worker_config(relay.address, tmp_path), name="robot")
            try:
                worker.run(max_steps=24, log=None)
            finally:
                worker.close(flush_timeout=20)
            assert worker.client.unacknowledged() == 0
        assert wait_for(lambda: sum(len(b["reward"]) for b in batches) >= 48)
    finally:
        stop.set()
        thread.join(timeout=10)
        source.close()
    assert sum(len(b["reward"]) for b in batches) == 48 and source.env_steps == 48
    assert source.backend.counts["duplicates"] == 0 and relay.counters["duplicates"] == 0


def test_a_worker_side_compressor_round_trips_and_crc_debug_catches_a_wrong_decompressor(relay, tmp_path,
                                                                                         monkeypatch):
    probe = make(DRONE)  # its observation ends with its last action, which SAC scales to the bounds
    codec = ActionBufferCompressor(act_buf_len=1, action_space=probe.action_space)
    probe.close()
    originals, wire_fields = [], []

    def compress(batch):
        originals.append({k: v.copy() for k, v in batch.items()})
        out = codec.compress(batch)
        wire_fields.append(sorted(out))
        return out

    def corrupt(batch):
        out = codec.decompress(batch)
        out["next_obs"] = out["next_obs"].copy()
        out["next_obs"][-1, -1] += 0.5  # one value of one row
        return out

    hooks = types.ModuleType("relayrl_test_worker_hooks")
    hooks.compress, hooks.decompress, hooks.corrupt = compress, codec.decompress, corrupt
    monkeypatch.setitem(sys.modules, hooks.__name__, hooks)
    worker = RemoteWorker(worker_config(relay.address, tmp_path, f"net.compressor={hooks.__name__}:compress",
                                        "net.crc_debug=true", env=DRONE))
    source = trainer_source(relay.address, f"net.decompressor={hooks.__name__}:decompress", "net.crc_debug=true",
                            env=DRONE)
    try:
        source.reset(0)
        publish(source, DRONE)
        assert worker.client.wait_connected(5)
        worker.run(max_steps=16, log=None)
        got = pull_steps(source, 16)
        assert wire_fields and all("next_obs" not in f and "next_obs_head" in f for f in wire_fields)
        for key in originals[0]:
            np.testing.assert_array_equal(np.concatenate([b[key] for b in got]),
                                          np.concatenate([o[key] for o in originals]), err_msg=key)
        source.close()
        source = trainer_source(relay.address, f"net.decompressor={hooks.__name__}:corrupt", "net.crc_debug=true",
                                env=DRONE)
        source.reset(0)
        publish(source, DRONE)
        worker.run(max_steps=24, log=None)
        with pytest.raises(RelayRLError, match=r"crc_debug: chunk \d+ of worker .*'next_obs'"):
            pull_steps(source, 8)
    finally:
        worker.close(flush_timeout=0)
        source.close()


def test_no_packet_is_smaller_than_min_samples_per_worker_packet_until_the_worker_stops(relay, tmp_path):
    """Chunks of 8 transitions are held until 20 have gathered (an episode's end does not send them);
    what is left goes when the worker closes."""
    trainer = RelayClient(relay.address, "trainer", heartbeat_s=0.1, timeout_s=2)
    worker = RemoteWorker(worker_config(relay.address, tmp_path, "net.min_samples_per_worker_packet=20",
                                        "env.max_episode_steps=12"))
    received: list[wire.Message] = []

    def take(count: int) -> bool:
        msgs = trainer.receive(0.1)
        trainer.ack(msgs)
        received.extend(msgs)
        return len(received) >= count

    try:
        assert trainer.wait_connected(5) and worker.client.wait_connected(5)
        publish(trainer)
        assert wait_for(lambda: worker.client._weights_in is not None)  # (so it announces nothing while it waits)
        worker.run(max_steps=40, log=None)  # 5 collections of 8, and 3 episode ends
        assert wait_for(lambda: take(1))
        assert not take(2)  # (waited 0.1 s more)
        assert [len(m.arrays["reward"]) for m in received] == [24]
        assert sum(len(m.batch["reward"]) for m in worker._pending) == 16  # held back
        closing = threading.Thread(target=worker.close, kwargs={"flush_timeout": 20})
        closing.start()
        assert wait_for(lambda: take(2))
        closing.join(timeout=30)
        assert [len(m.arrays["reward"]) for m in received] == [24, 16]  # the rest, sent as the worker stops
        assert sum(len(n) for n in [m.meta["lengths"] for m in received]) == 3
        assert worker.client.unacknowledged() == 0
    finally:
        worker.close(flush_timeout=0)
        trainer.close()


def test_a_worker_on_another_env_hears_why_its_samples_are_not_used(relay, tmp_path, capsys, monkeypatch):
    """`relayrl worker --env MountainCarContinuous-v0` against a Pendulum-v1 trainer: every chunk is
    refused (observations 2 wide, not 3); the worker prints why once, counts them, and its log line
    says so; the trainer counts them by cause and learns nothing from them."""
    monkeypatch.setattr("relayrl.net.remote_worker.LOG_EVERY_S", 0.0)  # a progress line after every chunk
    source = trainer_source(relay.address)
    source.reset(0)
    stop = threading.Event()

    def trainer():
        while not stop.is_set():
            batch, _ = source.pull()
            assert not batch

    thread = threading.Thread(target=trainer, daemon=True)
    thread.start()
    # (an expert: the trainer's weights would not fit its policy; a worker of one's own could send such chunks)
    worker = RemoteWorker(worker_config(relay.address, tmp_path, env="MountainCarContinuous-v0"), name="lost",
                          expert=True)
    log = types.SimpleNamespace(lines=[])
    log.write = lambda text: log.lines.append(text)
    log.flush = lambda: None
    try:
        worker.run(max_steps=24, log=None)  # three chunks of 8 steps
        assert wait_for(lambda: worker.client.unacknowledged() == 0 and worker.client.stats["chunks_refused"] == 3)
        worker.run(max_steps=32, log=log)  # one more, and a progress line that counts the three
        assert wait_for(lambda: worker.client.unacknowledged() == 0 and worker.client.stats["chunks_refused"] == 4)
    finally:
        worker.close(flush_timeout=0)
        stop.set()
        thread.join(timeout=10)
        source.close()
    assert worker.stats()["chunks_refused"] == 4 and worker.client.chunk_refusals == {"shape": 4}
    assert source.backend.refused == {"shape": 4} and source.stats()["net/refused/shape"] == 4
    assert source.env_steps == 0 and source.counts["chunks"] == 0
    err = capsys.readouterr().err
    told = [line for line in err.splitlines() if line.startswith("relayrl worker lost:")]
    assert len(told) == 1 and "observation width 2, expected 3 (Pendulum-v1, sac)" in told[0]
    assert "run the worker with the trainer's --env" in told[0]
    assert err.count("relayrl: refused chunk 0 of worker 'lost' (shape)") == 1
    assert any("refused 3 (shape 3)" in line or "refused 4 (shape 4)" in line for line in log.lines), log.lines
