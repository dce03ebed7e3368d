"""A remote worker collects only what the trainer takes: nothing while the relay has no trainer or the
worker holds no weights of the connected trainer's run, and at most min(net.window, net.backlog)
chunks not yet acknowledged; it says what it waits for. Acks of chunks a full backlog dropped still
count. The trainer's waits on the relay and on the workers end on Ctrl-C (its stop event).
Real sockets: a relay in a thread, trainers as RelayClients (or the relay pool), the worker's loop in
a thread."""

from __future__ import annotations

import io
import socket
import threading
import time
from contextlib import contextmanager
from typing import Iterator

import numpy as np
import pytest

from relayrl.algos import get_algo
from relayrl.config import build_config
from relayrl.envs.registry import make
from relayrl.net import wire
from relayrl.net.client import RelayClient
from relayrl.net.backend import relay_pool
from relayrl.net.remote_worker import RemoteWorker
from relayrl.testing.relay import running_relay

FAST = ["net.heartbeat_s=0.1", "net.timeout_s=2", "env.num_envs=1", "sac.steps_per_iteration=8"]


def worker_config(address: str, tmp_path, *sets: str):
    return build_config("sac", None, [*FAST, f"net.weights_dir={tmp_path / 'weights'}", *sets],
                        {"env.id": "Pendulum-v1", "net.server": address})


def sac_weights() -> bytes:
    env = make("Pendulum-v1")
    try:
        cfg = build_config("sac", None, [], {"env.id": "Pendulum-v1"}).algo_config
        policy = get_algo("sac").build_policy(cfg, env.observation_space, env.action_space)
        return wire.weights_to_bytes(policy.get_weights())
    finally:
        env.close()


@pytest.fixture
def relay():
    with running_relay() as r:
        yield r


@pytest.fixture
def trainers(relay):
    """``trainers()``: a connected trainer RelayClient on the relay; all closed at the end."""
    made: list[RelayClient] = []

    def make_trainer() -> RelayClient:
        client = RelayClient(relay.address, "trainer", heartbeat_s=0.1, timeout_s=2)
        made.append(client)
        assert client.wait_connected(10)
        return client

    yield make_trainer
    for client in made:
        client.close(timeout=0)


@contextmanager
def consuming(trainer: RelayClient) -> Iterator[list[wire.Message]]:
    """The trainer takes and acknowledges every chunk that comes, in a thread, while the block runs."""
    got: list[wire.Message] = []
    stop = threading.Event()

    def loop() -> None:
        while not stop.is_set() and not trainer.closed:
            msgs = trainer.receive(0.1)
            if msgs:
                trainer.ack(msgs)
                got.extend(msgs)

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    try:
        yield got
    finally:
        stop.set()
        thread.join(timeout=10)


@contextmanager
def running(worker: RemoteWorker) -> Iterator[io.StringIO]:
    """The worker's loop in a thread, its notices in the StringIO yielded."""
    log, stop = io.StringIO(), threading.Event()
    thread = threading.Thread(target=worker.run, kwargs={"stop": stop, "log": log}, daemon=True)
    thread.start()
    try:
        yield log
    finally:
        stop.set()
        thread.join(timeout=10)
        worker.close(flush_timeout=0)


def wait_for(condition, what: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def settled_steps(worker: RemoteWorker, quiet_s: float = 1.0, timeout: float = 20.0) -> int:
    """The worker's env steps once they have not changed for ``quiet_s`` (it stopped collecting)."""
    deadline = time.monotonic() + timeout
    last, since = worker.env_steps, time.monotonic()
    while time.monotonic() - since < quiet_s:
        assert time.monotonic() < deadline, f"the worker kept collecting ({worker.env_steps} env steps)"
        time.sleep(0.05)
        if worker.env_steps != last:
            last, since = worker.env_steps, time.monotonic()
    return last


def test_a_worker_collects_only_for_the_trainer_that_is_there_with_its_runs_weights(relay, trainers, tmp_path):
    worker = RemoteWorker(worker_config(relay.address, tmp_path), name="w")
    with running(worker) as log:
        wait_for(lambda: "waiting for a trainer at the relay" in log.getvalue(), "the worker to say it waits")
        assert worker.env_steps == 0  # no trainer: not one step

        first = trainers()
        with consuming(first):
            first.publish_weights(3, sac_weights())
            wait_for(lambda: worker.env_steps > 0, "the worker to collect for the trainer")
        first.close()  # the trainer exits (its run ends)
        wait_for(lambda: log.getvalue().count("waiting for a trainer at the relay") == 2, "the second notice")
        stopped_at = settled_steps(worker)

        second = trainers()  # a new run: the first run's weights (which the worker holds) are not its own
        with consuming(second) as got:
            wait_for(lambda: "waiting for the weights of the trainer's run" in log.getvalue(), "the weights notice")
            assert worker.env_steps == stopped_at and relay.weights is None
            # it told the new run its spaces (the other chunks are the first run's, which that trainer left untaken)
            [told] = [m for m in got if m.version == -1]
            assert not told.arrays and told.meta["spaces"] == worker.spaces and told.meta["env_steps"] == 0
            assert all(m.version == 3 for m in got if m is not told)
            second.publish_weights(0, sac_weights())
            wait_for(lambda: worker.env_steps > stopped_at, "the worker to collect with the new run's weights")
        assert worker._weights_run == second.incarnation and worker.worker.version == 0
        assert "collecting again" in log.getvalue()


def test_without_acknowledgements_the_worker_stops_at_its_window_of_chunks(relay, trainers, tmp_path):
    """A trainer that takes nothing (busy, or stuck) gets at most window chunks; the worker waits for
    acks asleep, and its backlog drops nothing."""
    worker = RemoteWorker(worker_config(relay.address, tmp_path, "net.window=4", "net.backlog=8"), name="w")
    trainer = trainers()
    trainer.publish_weights(1, sac_weights())
    with running(worker):
        held: list[wire.Message] = []
        wait_for(lambda: held.extend(trainer.receive(0.1)) or len(held) >= 4, "four chunks")
        steps = settled_steps(worker)
        assert steps <= 4 * 8 and worker.client.unacknowledged() == 4  # four chunks of 8 env steps
        cpu = time.process_time()
        time.sleep(1.0)
        assert time.process_time() - cpu < 0.6  # (it sleeps on the socket; a busy loop would take ~1 s)
        held.extend(trainer.receive(0.2))
        assert len(held) == 4 and worker.env_steps == steps
        trainer.ack(held)  # the trainer takes them: four more
        wait_for(lambda: held.extend(trainer.receive(0.1)) or len(held) >= 8, "four more chunks")
        assert settled_steps(worker) <= 8 * 8
        assert worker.client.stats["backlog_drops"] == 0 and worker.client.stats["acked"] == 4


def test_acknowledgements_of_chunks_a_full_backlog_dropped_still_count(relay, trainers):
    """The relay had them when the backlog let them go: the trainer learns from them, and says so."""
    worker = RelayClient(relay.address, "worker", name="w", heartbeat_s=0.1, timeout_s=2, backlog=2, window=8)
    try:
        assert worker.wait_connected(10)
        for i in range(5):  # each sent to the relay before the next one pushes the oldest out of the backlog
            worker.send_samples({"reward": np.full(3, i, np.float32)}, 0, {"env_steps": 3})
            wait_for(lambda: worker.stats["sent"] == i + 1, f"chunk {i} to be sent")
        assert worker.stats["backlog_drops"] == 3 and worker.unacknowledged() == 2
        trainer = trainers()
        with consuming(trainer) as got:
            wait_for(lambda: worker.stats["acked"] == 5, "five acknowledgements")
        assert [m.seq for m in got] == [0, 1, 2, 3, 4] and worker.unacknowledged() == 0
    finally:
        worker.close(timeout=0)


def test_ctrl_c_ends_the_trainers_waits_on_the_relay_and_on_the_workers(relay, capsys):
    """``stop`` is the event relayrl train's first Ctrl-C sets: a wait for the relay, and PPO's wait for
    rollouts, end at once (KeyboardInterrupt, exit 130) instead of running on to their timeouts."""
    with socket.socket() as s:  # a port where no relay listens
        s.bind(("127.0.0.1", 0))
        nobody = f"127.0.0.1:{s.getsockname()[1]}"
    for address, algo in ((nobody, "sac"), (relay.address, "ppo")):
        config = build_config(algo, None, ["net.heartbeat_s=0.1", "net.timeout_s=2", "net.connect_timeout_s=60"],
                              {"env.id": "Pendulum-v1", "net.server": address})
        env = make("Pendulum-v1")
        stop = threading.Event()
        source = relay_pool(config, env.observation_space, env.action_space, stop=stop)
        env.close()
        ended: list[BaseException] = []

        def wait() -> None:
            try:
                source.reset(0)
                source.pull()  # (PPO: a rollout no worker sends)
            except BaseException as exc:  # noqa: BLE001 - the test looks at which
                ended.append(exc)

        thread = threading.Thread(target=wait, daemon=True)
        try:
            thread.start()
            said: list[str] = []
            wait_for(lambda: said.append(capsys.readouterr().err) or "waiting for" in "".join(said),
                     "the trainer to say what it waits for")
            stop.set()
            thread.join(timeout=10)
            assert not thread.is_alive() and len(ended) == 1 and isinstance(ended[0], KeyboardInterrupt), ended
        finally:
            stop.set()
            thread.join(timeout=10)
            source.close()
