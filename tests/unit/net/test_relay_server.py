"""The relay over real ZeroMQ sockets on 127.0.0.1: RelayClients and raw DEALER sockets speaking the
wire protocol (to control seqs exactly and to misbehave). Every wait polls a condition with a
generous deadline; nothing asserts on timing."""

import pickle
import random
import shutil
import threading
import time
from dataclasses import dataclass

import msgpack
import numpy as np
import pytest
import zmq
from zmq.utils.monitor import recv_monitor_message

from relayrl.errors import ConfigError
from relayrl.net import keys, wire
from relayrl.net.client import RelayClient, RelayRefused
from relayrl.net.relay import Peer, Relay, RelayOptions
from relayrl.net.seen import WINDOW

FAST = {"heartbeat_s": 0.1, "timeout_s": 1.0}
DEADLINE = 10.0


def wait_until(condition, what: str, timeout: float = DEADLINE):
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.01)


def stats(relay: Relay) -> dict:
    """``relay.stats()`` read from the test's thread (it iterates the peers the relay thread changes)."""
    while True:
        try:
            return relay.stats()
        except RuntimeError:  # dictionary changed size during iteration
            time.sleep(0.001)


@dataclass
class Running:
    relay: Relay
    stop: threading.Event
    thread: threading.Thread

    @property
    def server(self) -> str:
        return self.relay.endpoint.removeprefix("tcp://")

    def shutdown(self) -> None:
        self.stop.set()
        self.thread.join(timeout=10)
        assert not self.thread.is_alive()


def start(options: RelayOptions, attempts_s: float = 0.0) -> Running:
    deadline = time.monotonic() + attempts_s
    while True:
        try:
            relay = Relay(options)
            break
        except ConfigError:  # the port of a relay that just closed may take a moment to free
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)
    stop = threading.Event()
    thread = threading.Thread(target=relay.serve, args=(stop,), kwargs={"log": None}, daemon=True)
    thread.start()
    return Running(relay, stop, thread)


def relay_options(**overrides) -> RelayOptions:
    return RelayOptions(**{"bind": "127.0.0.1:0", "heartbeat_s": 0.1, "peer_timeout_s": 1.0,
                           "metrics_every_s": 3600.0, **overrides})


@pytest.fixture
def make_relay():
    running: list[Running] = []

    def make(**overrides) -> Running:
        handle = start(relay_options(**overrides))
        running.append(handle)
        return handle

    yield make
    for handle in running:
        handle.stop.set()
    for handle in running:
        handle.thread.join(timeout=10)


@pytest.fixture
def clients():
    made: list[RelayClient] = []

    def make(server: str, role: str, name: str, **kwargs) -> RelayClient:
        client = RelayClient(server, role, name=name, **{**FAST, **kwargs})
        made.append(client)
        return client

    yield make
    for client in made:
        client.close(timeout=0.5)


class Raw:
    """A DEALER speaking the protocol by hand."""

    def __init__(self, server: str, name: str = "raw"):
        self.name = name
        self.sock = zmq.Context.instance().socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.connect(f"tcp://{server}")
        self.pending: list[wire.Message] = []

    def send_frames(self, frames) -> None:
        self.sock.send_multipart(frames)

    def send(self, type: str, **fields) -> None:
        self.send_frames(wire.encode(type, **{"sender": self.name, **fields}))

    def recv(self, timeout: float) -> wire.Message | None:
        if self.pending:
            return self.pending.pop(0)
        if not self.sock.poll(int(timeout * 1000)):
            return None
        return wire.decode(self.sock.recv_multipart())

    def expect(self, type: str, timeout: float = DEADLINE) -> wire.Message:
        """The next message of ``type``; others that arrive first are kept for ``recv``."""
        for i, msg in enumerate(self.pending):
            if msg.type == type:
                return self.pending.pop(i)
        deadline, skipped = time.monotonic() + timeout, []
        try:
            while time.monotonic() < deadline:
                if not self.sock.poll(10):
                    continue
                msg = wire.decode(self.sock.recv_multipart())
                if msg.type == type:
                    return msg
                skipped.append(msg)
            raise AssertionError(f"{self.name}: no {type} within {timeout:.0f} s (got {[m.type for m in skipped]})")
        finally:
            self.pending.extend(skipped)

    def hello(self, role: str) -> wire.Message:
        self.send(wire.HELLO, meta={"role": role})
        return self.expect(wire.WELCOME)

    def sync(self) -> None:
        """Ping and wait for the pong: the relay has handled everything this socket sent before."""
        self.send(wire.PING)
        self.expect(wire.PONG)

    def drain(self, quiet: float = 0.3) -> list[wire.Message]:
        out = []
        while (msg := self.recv(quiet)) is not None:
            out.append(msg)
        return out

    def close(self) -> None:
        self.sock.close(linger=0)


@pytest.fixture
def raw():
    made: list[Raw] = []

    def make(server: str, name: str = "raw") -> Raw:
        sock = Raw(server, name)
        made.append(sock)
        return sock

    yield make
    for sock in made:
        sock.close()


def chunk(i: int) -> dict[str, np.ndarray]:
    return {"obs": np.full((4, 2), i, np.float32), "reward": np.arange(4, dtype=np.float64) + i}


def collect(trainer: RelayClient, count: int, ack: bool = True, timeout: float = DEADLINE) -> list[wire.Message]:
    """Receive ``count`` chunks (acknowledging them as they come unless ``ack`` is False)."""
    got: list[wire.Message] = []
    deadline = time.monotonic() + timeout
    while len(got) < count:
        assert time.monotonic() < deadline, f"received {len(got)} chunks of {count} within {timeout:.0f} s"
        msgs = trainer.receive(0.2)
        if ack and msgs:
            trainer.ack(msgs)
        got.extend(msgs)
    return got


def connected(*clients_: RelayClient) -> None:
    for client in clients_:
        assert client.wait_connected(DEADLINE), f"{client.name} did not connect"


# ---------------------------------------------------------------- samples


def test_worker_chunks_reach_the_trainer_once_in_order_and_acks_drain_the_backlog(make_relay, clients):
    run = make_relay()
    trainer = clients(run.server, "trainer", "t")
    worker = clients(run.server, "worker", "w")
    connected(trainer, worker)
    count = 100  # more than both windows (client 64, relay 32): flow control has to work
    seqs = [worker.send_samples(chunk(i), version=i % 3, meta={"i": i}) for i in range(count)]
    assert seqs == list(range(count))
    got = collect(trainer, count)
    wait_until(lambda: worker.unacknowledged() == 0, "the worker's backlog to drain")
    assert trainer.receive(0.5) == []  # nothing more: no chunk came twice
    assert [m.seq for m in got] == list(range(count))
    assert {m.sender for m in got} == {"w"} and {m.type for m in got} == {wire.SAMPLES}
    for i, msg in enumerate(got):
        assert msg.meta == {"i": i} and msg.version == i % 3
        np.testing.assert_array_equal(msg.arrays["obs"], chunk(i)["obs"])
        np.testing.assert_array_equal(msg.arrays["reward"], chunk(i)["reward"])
    assert worker.stats["acked"] == count and worker.stats["relay_drops"] == 0
    wait_until(lambda: stats(run.relay)["inflight"] == 0, "the relay to clear its in-flight chunks")
    s = stats(run.relay)
    assert (s["chunks_in"], s["chunks_out"], s["duplicates"], s["drops"], s["rejects"]) == (count, count, 0, 0, 0)
    assert (s["workers"], s["trainer"], s["queue_depth"]) == (1, 1, 0)


def test_a_bounded_queue_drops_the_oldest_and_tells_the_worker(make_relay, clients):
    run = make_relay(max_queue=5)
    worker = clients(run.server, "worker", "w")
    connected(worker)
    for i in range(12):
        worker.send_samples(chunk(i), version=0, meta={})
    wait_until(lambda: run.relay.counters["chunks_in"] == 12, "the relay to take 12 chunks")
    s = stats(run.relay)
    assert s["drops"] == 7 and s["queue_depth"] == 5
    wait_until(lambda: worker.stats["relay_drops"] == 7, "the worker to hear of 7 drops")
    wait_until(lambda: worker.unacknowledged() == 5, "the worker to free the dropped chunks")
    assert worker.stats["backlog_drops"] == 0
    trainer = clients(run.server, "trainer", "t")
    got = collect(trainer, 5)
    assert [m.seq for m in got] == [7, 8, 9, 10, 11]
    np.testing.assert_array_equal(got[0].arrays["obs"], chunk(7)["obs"])
    wait_until(lambda: worker.unacknowledged() == 0, "the worker's backlog to drain")
    assert trainer.receive(0.5) == []
    assert stats(run.relay)["drops"] == 7


def test_a_resent_chunk_is_delivered_once(make_relay, clients, raw):
    run = make_relay(peer_timeout_s=30.0)  # raw sockets do not ping
    worker = raw(run.server, "w")
    worker.hello("worker")
    for seq in (0, 0, 1):  # a resend while the first is still queued
        worker.send(wire.SAMPLES, seq=seq, arrays=chunk(seq))
    worker.sync()
    assert run.relay.counters["duplicates"] == 1 and run.relay.counters["chunks_in"] == 2
    trainer = clients(run.server, "trainer", "t")
    got = collect(trainer, 2)
    assert [(m.sender, m.seq) for m in got] == [("w", 0), ("w", 1)]
    acks: list[int] = []
    while sorted(acks) != [0, 1]:
        acks += worker.expect(wire.ACK).meta["seqs"]
        assert len(acks) <= 2, acks
    worker.send(wire.SAMPLES, seq=0, arrays=chunk(0))  # a resend after delivery (its ack was "lost")
    again = worker.expect(wire.ACK)
    assert again.meta["seqs"] == [0] and "dropped" not in again.meta  # acknowledged again, not forwarded
    assert run.relay.counters["duplicates"] == 2 and run.relay.counters["chunks_in"] == 2
    worker.send(wire.SAMPLES, seq=2, arrays=chunk(2))
    assert [m.seq for m in collect(trainer, 1)] == [2]  # a new seq still goes through...
    assert trainer.receive(0.5) == []  # ...and the repeats never did


def test_in_flight_chunks_of_a_vanished_trainer_go_to_the_next_one(make_relay, clients, raw):
    run = make_relay()
    worker = clients(run.server, "worker", "w")
    connected(worker)
    for i in range(5):
        worker.send_samples(chunk(i), version=0, meta={})
    # a trainer that receives the chunks and disappears without acknowledging or saying bye
    silent = raw(run.server, "silent-trainer")
    silent.hello("trainer")
    first = [silent.expect(wire.SAMPLES) for _ in range(5)]
    assert [m.seq for m in first] == list(range(5))
    silent.close()
    wait_until(lambda: run.relay.trainer is None, "the relay to drop the silent trainer (peer timeout)")
    wait_until(lambda: len(run.relay.queue) == 5, "the 5 unacknowledged chunks back in the queue")
    assert len(run.relay.inflight) == 0
    # a client trainer that receives them and closes without acknowledging
    second = clients(run.server, "trainer", "t2")
    assert [m.seq for m in collect(second, 5, ack=False)] == list(range(5))
    second.close(timeout=0.5)
    wait_until(lambda: run.relay.trainer is None, "the relay to drop the closed trainer")
    third = clients(run.server, "trainer", "t3")
    got = collect(third, 5)
    assert [(m.sender, m.seq) for m in got] == [("w", i) for i in range(5)]
    wait_until(lambda: worker.unacknowledged() == 0, "the worker's backlog to drain")
    assert third.receive(0.5) == []
    assert worker.stats["relay_drops"] == 0


def test_a_resend_of_a_chunk_put_back_in_the_queue_is_still_a_duplicate(make_relay, clients, raw):
    run = make_relay(peer_timeout_s=30.0)  # raw sockets do not ping
    worker = raw(run.server, "w")
    worker.hello("worker")
    for seq in range(3):
        worker.send(wire.SAMPLES, seq=seq, arrays=chunk(seq))
    trainer = raw(run.server, "t1")
    trainer.hello("trainer")
    assert [trainer.expect(wire.SAMPLES).seq for _ in range(3)] == [0, 1, 2]
    trainer.send(wire.BYE)  # in flight and unacknowledged: back to the queue
    wait_until(lambda: run.relay.trainer is None, "the relay to drop the trainer that said bye")
    for seq in range(3):  # the worker resends (as after a reconnect)
        worker.send(wire.SAMPLES, seq=seq, arrays=chunk(seq))
    worker.sync()
    assert run.relay.counters["duplicates"] == 3 and len(run.relay.queue) == 3
    second = clients(run.server, "trainer", "t2")
    assert [m.seq for m in collect(second, 3)] == [0, 1, 2]
    assert second.receive(0.5) == []


def test_a_restarted_worker_process_that_reuses_its_name_is_not_taken_for_a_repeat(make_relay, clients):
    """A new process under the same --name numbers its chunks from 0 again: its larger incarnation
    keeps the relay (and the trainer) from dropping them as resends of the old process's."""
    run = make_relay()
    trainer = clients(run.server, "trainer", "t")
    first = clients(run.server, "worker", "w")
    connected(trainer, first)
    for i in range(3):
        first.send_samples(chunk(i), version=0, meta={"i": i})
    assert [m.seq for m in collect(trainer, 3)] == [0, 1, 2]
    wait_until(lambda: first.unacknowledged() == 0, "the first process's backlog to drain")
    first.close(timeout=0.5)  # the process ends; another starts with the same name
    second = clients(run.server, "worker", "w")
    connected(second)
    assert second.incarnation > first.incarnation
    assert [second.send_samples(chunk(i), version=0, meta={"i": i}) for i in range(3, 6)] == [0, 1, 2]
    got = collect(trainer, 3)
    assert [(m.incarnation, m.seq, m.meta["i"]) for m in got] == [(second.incarnation, s, 3 + s) for s in range(3)]
    wait_until(lambda: second.unacknowledged() == 0, "the second process's backlog to drain")
    assert second.stats["acked"] == 3 and trainer.receive(0.5) == []
    assert run.relay.counters["duplicates"] == 0 and run.relay.counters["chunks_in"] == 6


def test_an_older_process_of_a_name_is_refused_and_each_process_hears_only_its_own_acks(make_relay, clients, raw):
    run = make_relay(peer_timeout_s=30.0)  # raw sockets do not ping
    old = raw(run.server, "w")
    old.send(wire.HELLO, incarnation=10, meta={"role": "worker"})
    old.expect(wire.WELCOME)
    old.send(wire.SAMPLES, incarnation=10, seq=0, arrays=chunk(0))  # queued: no trainer yet
    old.sync()
    new = raw(run.server, "w")  # the process restarted (the old one died without a word)
    new.send(wire.HELLO, incarnation=20, meta={"role": "worker"})
    new.expect(wire.WELCOME)
    new.send(wire.SAMPLES, incarnation=20, seq=0, arrays=chunk(1))  # seq 0 again: another chunk
    new.sync()
    assert run.relay.counters["chunks_in"] == 2 and run.relay.counters["duplicates"] == 0
    # the old incarnation (a second live process with that name, say) may not come back
    old.send(wire.HELLO, incarnation=10, meta={"role": "worker"})
    assert "its own --name" in old.expect(wire.REFUSED).meta["reason"]
    trainer = clients(run.server, "trainer", "t")
    got = collect(trainer, 2)
    assert [(m.incarnation, m.seq) for m in got] == [(10, 0), (20, 0)]
    np.testing.assert_array_equal(got[1].arrays["obs"], chunk(1)["obs"])
    ack = new.expect(wire.ACK)
    assert (ack.incarnation, ack.meta["seqs"]) == (20, [0])
    assert [m for m in new.drain() if m.type == wire.ACK] == []  # the old process's seq 0 is not the new one's


def test_a_worker_may_only_send_chunks_under_its_own_name_and_incarnation(make_relay, clients, raw):
    """The trainer dedups and acknowledges by the header's sender: a worker speaking for another could
    have that one's chunks dropped as repeats."""
    run = make_relay(peer_timeout_s=30.0)
    victim = clients(run.server, "worker", "victim")
    connected(victim)
    spoofer = raw(run.server, "spoofer")
    spoofer.hello("worker")
    spoofer.send_frames(wire.encode(wire.SAMPLES, sender="victim", incarnation=victim.incarnation, seq=0,
                                    arrays=chunk(9)))
    spoofer.send(wire.SAMPLES, incarnation=victim.incarnation, seq=0, arrays=chunk(9))  # not its incarnation
    spoofer.sync()
    assert run.relay.counters["rejects"] == 2 and run.relay.counters["chunks_in"] == 0 and not run.relay.queue
    victim.send_samples(chunk(0), version=0, meta={})
    trainer = clients(run.server, "trainer", "t")
    got = collect(trainer, 1)
    assert (got[0].sender, got[0].seq) == ("victim", 0)
    np.testing.assert_array_equal(got[0].arrays["obs"], chunk(0)["obs"])
    wait_until(lambda: victim.unacknowledged() == 0, "the victim's chunk to be acknowledged")
    assert trainer.receive(0.5) == []


def test_a_worker_backlog_larger_than_the_dedup_window_is_refused():
    with pytest.raises(ConfigError, match=f"net.backlog .* more than the {WINDOW} chunks"):
        RelayClient("127.0.0.1:1", "worker", backlog=WINDOW, window=64)


def test_the_relays_memory_of_delivered_chunks_stays_bounded_after_a_gap():
    """Seq 1 never reaches the relay (the worker's backlog dropped it); 10,000 acknowledged chunks
    later the relay must not remember each of them."""
    relay = Relay(relay_options())
    try:
        seen = relay.done.get("w", 7)
        trainer = Peer(b"t", "trainer", "t", time.monotonic())
        relay._ack(trainer, wire.Message(wire.ACK, meta={"acks": [["w", 7, 0]]}), [])
        worst = 0
        for start in range(2, 10_002, 100):
            relay._ack(trainer, wire.Message(wire.ACK, meta={"acks": [["w", 7, s] for s in range(start, start + 100)]}),
                       [])
            worst = max(worst, len(seen))
        assert worst <= WINDOW and len(seen) == 0 and seen.floor == 10_002
    finally:
        relay.close()


# ---------------------------------------------------------------- one trainer, bounded workers


def test_a_second_trainer_is_refused_while_the_first_lives(make_relay, clients):
    run = make_relay(peer_timeout_s=1.0)
    first = clients(run.server, "trainer", "first-trainer")
    connected(first)
    second = clients(run.server, "trainer", "t2")
    # it waits once for the slot (the first might have died), then the refusal is final
    with pytest.raises(RelayRefused, match="another trainer .*'first-trainer'.* is connected"):
        second.wait_connected(DEADLINE)
    assert run.relay.counters["refused"] >= 1 and run.relay.trainer.name == "first-trainer"
    with pytest.raises(RelayRefused):  # the refusal sticks: the caller learns it on any call
        second.send_samples(chunk(0), version=0, meta={})


def test_a_trainer_that_died_silently_is_replaced_after_the_peer_timeout(make_relay, clients, raw):
    run = make_relay(peer_timeout_s=1.0)
    dead = raw(run.server, "dead-trainer")
    dead.hello("trainer")  # and never a heartbeat again, like a killed process
    restarted = clients(run.server, "trainer", "t2")
    connected(restarted)
    assert run.relay.trainer.name == "t2"


def test_a_bye_frees_the_trainer_slot(make_relay, clients, raw):
    run = make_relay(peer_timeout_s=30.0)  # long: only the bye frees the slot within this test
    first = raw(run.server, "first-trainer")
    first.hello("trainer")
    first.send(wire.BYE)
    wait_until(lambda: run.relay.trainer is None, "the relay to free the trainer slot")
    third = clients(run.server, "trainer", "t3")
    connected(third)
    assert run.relay.trainer.name == "t3"


def test_a_closed_trainer_client_frees_the_slot_at_once(make_relay, clients):
    run = make_relay(peer_timeout_s=30.0)
    first = clients(run.server, "trainer", "t1")
    connected(first)
    first.close(timeout=1.0)
    wait_until(lambda: run.relay.trainer is None, "the relay to hear the closed trainer's bye", timeout=3.0)
    second = clients(run.server, "trainer", "t2")
    connected(second)


def test_max_workers_refuses_one_more_with_a_clear_message(make_relay, clients):
    run = make_relay(max_workers=2)
    workers = [clients(run.server, "worker", f"w{i}") for i in range(2)]
    connected(*workers)
    extra = clients(run.server, "worker", "w2")
    with pytest.raises(RelayRefused, match="maximum of 2 workers .*--max-workers"):
        extra.wait_connected(DEADLINE)
    assert stats(run.relay)["workers"] == 2 and run.relay.counters["refused"] == 1
    trainer = clients(run.server, "trainer", "t")  # the trainer does not count as a worker
    connected(trainer)
    # a restarted worker (same name, new connection) replaces its stale self instead of being refused
    workers[0].close(timeout=0.5)
    again = clients(run.server, "worker", "w0")
    connected(again)
    assert stats(run.relay)["workers"] == 2


# ---------------------------------------------------------------- weights


def test_a_worker_that_joins_later_gets_the_current_weights_at_once(make_relay, clients):
    run = make_relay()
    trainer = clients(run.server, "trainer", "t")
    connected(trainer)
    weights = {"model": {"w": np.arange(6, dtype=np.float32).reshape(2, 3)}, "steps": 11}
    trainer.publish_weights(5, wire.weights_to_bytes(weights))
    wait_until(lambda: run.relay.weights is not None, "the relay to hold the weights")
    worker = clients(run.server, "worker", "w")
    connected(worker)
    msg = wait_until(worker.take_weights, "the late worker to receive the weights")
    assert msg.type == wire.WEIGHTS and msg.version == 5 and worker.relay_version == 5
    back = wire.weights_from_bytes(msg.blob)
    np.testing.assert_array_equal(back["model"]["w"], weights["model"]["w"])
    assert back["steps"] == 11


def test_a_pulling_worker_gets_weights_at_its_period_not_every_version_and_still_the_newest(make_relay, clients):
    """The actor model's FetchParam (net.param_pull_s): no broadcasts, a pull answered only with newer weights."""
    run = make_relay()
    trainer = clients(run.server, "trainer", "t")
    pushed = clients(run.server, "worker", "pushed")
    puller = clients(run.server, "worker", "puller", pull_s=0.5)
    connected(trainer, pushed, puller)
    published = 0
    deadline = time.monotonic() + 2.0  # 40 versions over 2 s: about 4 pulls
    while time.monotonic() < deadline:
        published += 1
        trainer.publish_weights(published, wire.weights_to_bytes({"w": np.full(3, float(published))}))
        time.sleep(0.05)
    newest = {"pushed": -1, "puller": -1}

    def both_have_the_last():
        for name, client in (("pushed", pushed), ("puller", puller)):
            msg = client.take_weights()
            if msg is not None:
                assert msg.version > newest[name], "weights went back or came twice"
                newest[name] = client.version = msg.version
        return newest["pushed"] == published and newest["puller"] == published

    wait_until(both_have_the_last, "both workers to hold the last version")
    assert pushed.stats["weights_in"] >= published * 0.8  # (a broadcast can be superseded before it is taken)
    assert 1 <= puller.stats["weights_in"] <= published // 4 and puller.stats["pulls"] >= 2
    pulls = puller.stats["pulls"]
    wait_until(lambda: puller.stats["pulls"] >= pulls + 2, "two more pulls")
    assert newest["puller"] == published and puller.take_weights() is None  # nothing newer: no answer


def test_a_pull_period_needs_a_relay(tmp_path):
    import relayrl
    with pytest.raises(ConfigError, match=r"net.param_pull_s .*is for remote workers behind a relay.*--server"):
        relayrl.train("dqn", "CartPole-v1", {"net": {"param_pull_s": 1.0}}, run_dir=tmp_path / "run")
    assert not (tmp_path / "run").exists()
    with pytest.raises(ConfigError, match="param_pull_s"):
        relayrl.train("dqn", "CartPole-v1", {"net": {"param_pull_s": 0}}, run_dir=tmp_path / "run")

def test_the_latest_weights_win(make_relay, clients):
    run = make_relay()
    trainer = clients(run.server, "trainer", "t")
    worker = clients(run.server, "worker", "w")
    connected(trainer, worker)
    for version in (1, 2, 3):
        trainer.publish_weights(version, wire.weights_to_bytes({"w": np.full(3, float(version))}))
    newest = {"version": -1}

    def has_three():
        msg = worker.take_weights()
        if msg is not None:
            assert msg.version >= newest["version"], "weights went back to an older version"
            newest["version"] = msg.version
            newest["blob"] = msg.blob
        return newest["version"] == 3

    wait_until(has_three, "the worker to get version 3")
    np.testing.assert_array_equal(wire.weights_from_bytes(newest["blob"])["w"], np.full(3, 3.0))
    worker.version = 3  # what RemoteWorker does once it loads them
    assert run.relay.weights[0] == 3
    later = worker.take_weights()
    assert later is None or later.version == 3  # nothing older follows
    late = clients(run.server, "worker", "late")
    assert wait_until(late.take_weights, "the late worker's weights").version == 3


# ---------------------------------------------------------------- misbehaving peers


def test_a_message_not_allowed_for_the_senders_role_is_rejected_and_not_forwarded(make_relay, clients, raw):
    run = make_relay(peer_timeout_s=30.0)  # raw sockets do not ping
    worker = clients(run.server, "worker", "w")
    connected(worker)
    evil_worker = raw(run.server, "evil-worker")
    evil_worker.hello("worker")
    evil_worker.send(wire.WEIGHTS, version=99, blob=wire.weights_to_bytes({"w": np.zeros(1)}))
    evil_worker.send(wire.ACK, meta={"acks": [["w", 0]]})
    evil_worker.sync()
    assert run.relay.counters["rejects"] == 2 and run.relay.counters["weights_in"] == 0
    assert run.relay.weights is None

    evil_trainer = raw(run.server, "evil-trainer")
    evil_trainer.hello("trainer")
    evil_trainer.send(wire.SAMPLES, seq=0, arrays=chunk(0))
    evil_trainer.send(wire.GET_WEIGHTS)
    evil_trainer.sync()
    assert run.relay.counters["rejects"] == 4 and run.relay.counters["chunks_in"] == 0
    assert len(run.relay.queue) == 0

    # what the trainer does receive is only the real worker's chunk...
    worker.send_samples(chunk(1), version=0, meta={})
    got = evil_trainer.expect(wire.SAMPLES)
    assert (got.sender, got.seq) == ("w", 0)
    assert [m for m in evil_trainer.drain() if m.type == wire.SAMPLES] == []
    # ...and the worker gets the trainer's weights, never the worker's version 99 (sent before, so it
    # would have arrived first and, being newer, been kept)
    evil_trainer.send(wire.WEIGHTS, version=5, blob=wire.weights_to_bytes({"w": np.ones(1)}))
    assert wait_until(worker.take_weights, "the worker's weights").version == 5
    # a peer that never said hello is asked to, and nothing it sends is taken
    stranger = raw(run.server, "stranger")
    stranger.send(wire.SAMPLES, seq=0, arrays=chunk(0))
    assert stranger.expect(wire.REHELLO).meta["session"] == run.relay.session
    assert run.relay.counters["chunks_in"] == 1


def _other_protocol() -> bytes:
    """A ping that says it speaks the previous protocol version (a client of an older release)."""
    frame = wire.encode(wire.PING)[0]
    ours = b"\xa5proto" + bytes([wire.PROTOCOL])
    assert ours in frame
    return frame.replace(ours, b"\xa5proto" + bytes([wire.PROTOCOL - 1]))


def _garbage(rng: random.Random) -> list[list[bytes]]:
    header = wire.encode(wire.SAMPLES, sender="g", seq=0, arrays=chunk(0))
    good = [bytes(f) for f in header]
    messages = []
    for _ in range(30):  # random multipart garbage
        messages.append([rng.randbytes(rng.randint(0, 64)) for _ in range(rng.randint(1, 4))])
    messages += [
        good[:-1],  # a missing frame
        [good[0], good[1][:-3]],  # a truncated body
        [good[0], good[1] + b"\0"],  # a body too long
        [good[0], good[1][:4], good[1][4:]],  # the body in two frames (protocol 2's frame per array)
        [good[0][: len(good[0]) // 2], *good[1:]],  # a truncated header
        [_other_protocol()],
        [pickle.dumps({"proto": 1, "type": "hello", "meta": {"role": "trainer"}})],  # a pickle
        [pickle.dumps(ValueError("x")), *good[1:]],
        [b"\x81\xa4type\x91\xa5hello"],  # {"type": ["hello"]}: no proto
        [msgpack.packb({"proto": 1, "type": ["samples"]})],  # an unhashable type
        [msgpack.packb({"proto": 1, "type": "samples", "arrays": [["x", "|u1", [2**32, 2**32]]]}),
         b""],  # a shape whose size overflows int64
        [b"\0" * 700_000, b"\0" * 700_000],  # each frame under the limit, the message over it
    ]
    return messages


def test_garbage_never_takes_the_relay_down(make_relay, clients, raw):
    run = make_relay(max_message_mb=1.0, peer_timeout_s=30.0)
    rng = random.Random(0)
    messages = _garbage(rng)
    senders = [raw(run.server, f"fuzz{i}") for i in range(3)]
    for i, frames in enumerate(messages):
        senders[i % 3].send_frames(frames)
    wait_until(lambda: run.relay.counters["rejects"] == len(messages), f"{len(messages)} rejects")
    # a frame over max_message_mb: libzmq (MAXMSGSIZE) drops the connection before the relay sees it
    big = raw(run.server, "big")
    big.hello("worker")
    monitor = big.sock.get_monitor_socket(zmq.EVENT_DISCONNECTED)
    try:
        big.send_frames([b"\0" * (2 * 2**20)])
        assert monitor.poll(int(DEADLINE * 1000)), "the relay kept a connection that sent a 2 MiB frame"
        assert recv_monitor_message(monitor)["event"] == zmq.EVENT_DISCONNECTED
    finally:
        big.sock.disable_monitor()
        monitor.close(linger=0)
    # ZeroMQ reconnects the socket: a new connection, a stranger to the relay, which still serves it
    big.send(wire.PING)
    assert big.expect(wire.REHELLO).meta["session"] == run.relay.session
    big.hello("worker")
    assert run.relay.counters["rejects"] == len(messages) and run.relay.counters["chunks_in"] == 0
    # a hello with no role, and a trainer that acknowledges nonsense
    nameless = raw(run.server, "")
    nameless.send(wire.HELLO, meta={"role": "admin"})
    assert "role" in nameless.expect(wire.REFUSED).meta["reason"]
    bad_trainer = raw(run.server, "bad-trainer")
    bad_trainer.hello("trainer")
    for acks in (5, "x", [["w", 0, "seq"]], [[1, 2, 3]], [["w"]], [["w", 0]], [["w", True, 0]], {"w": 1}, None):
        bad_trainer.send(wire.ACK, meta={"acks": acks})
    bad_trainer.send(wire.BYE)
    wait_until(lambda: run.relay.counters["rejects"] == len(messages) + 9, "the bad acks to be rejected")
    wait_until(lambda: run.relay.trainer is None, "the bad trainer's bye")
    for sock in senders:  # the garbage senders are still served
        sock.send(wire.PING)
        assert sock.expect(wire.REHELLO)
    assert run.thread.is_alive()

    trainer = clients(run.server, "trainer", "t")
    worker = clients(run.server, "worker", "w")
    connected(trainer, worker)
    worker.send_samples(chunk(3), version=0, meta={"ok": True})
    got = collect(trainer, 1)
    assert got[0].meta == {"ok": True} and got[0].sender == "w"
    trainer.publish_weights(1, wire.weights_to_bytes({"w": np.ones(2)}))
    assert wait_until(worker.take_weights, "weights after the fuzzing").version == 1
    wait_until(lambda: worker.unacknowledged() == 0, "the ack after the fuzzing")
    assert run.thread.is_alive() and run.relay.counters["chunks_in"] == 1


# ---------------------------------------------------------------- CURVE


def test_only_clients_with_authorized_keys_get_through(make_relay, clients, tmp_path):
    keys.generate(tmp_path / "keys", ["w1", "t1"], trainers=("t1",))
    keys.generate(tmp_path / "other", ["rogue", "stranger"])
    # rogue: an unknown client key but the right server key, so only the relay's check keeps it out
    shutil.copy(tmp_path / "keys" / "w1" / "server.key", tmp_path / "other" / "rogue" / "server.key")
    run = make_relay(keys=str(tmp_path / "keys" / "server"))
    trainer = clients(run.server, "trainer", "t1", keys=str(tmp_path / "keys" / "t1"))
    worker = clients(run.server, "worker", "w1", keys=str(tmp_path / "keys" / "w1"))
    outsiders = [clients(run.server, "worker", "rogue", keys=str(tmp_path / "other" / "rogue")),
                 clients(run.server, "worker", "stranger", keys=str(tmp_path / "other" / "stranger")),
                 clients(run.server, "worker", "plain"),
                 clients(run.server, "trainer", "rogue-trainer", keys=str(tmp_path / "other" / "rogue"))]
    connected(trainer, worker)
    trainer.publish_weights(2, wire.weights_to_bytes({"w": np.ones(2)}))
    assert wait_until(worker.take_weights, "the authorized worker's weights").version == 2
    worker.send_samples(chunk(0), version=2, meta={})
    assert [m.sender for m in collect(trainer, 1)] == ["w1"]
    for outsider in outsiders[:3]:
        outsider.send_samples(chunk(9), version=0, meta={})
    assert not outsiders[0].wait_connected(3)
    for outsider in outsiders:
        assert not outsider.connected.is_set(), outsider.name
        assert outsider.take_weights() is None and outsider.receive(0.0) == []
        assert outsider.stats["bytes_in"] == 0 and outsider.stats["received"] == 0, outsider.name
    assert trainer.receive(0.5) == []
    s = stats(run.relay)
    assert s["workers"] == 1 and s["chunks_in"] == 1 and run.relay.trainer.name == "t1"


def test_a_key_may_only_take_its_own_role_and_its_own_name(make_relay, clients, tmp_path):
    keys.generate(tmp_path / "keys", ["w1", "w2", "t1"], trainers=("t1",))
    run = make_relay(keys=str(tmp_path / "keys" / "server"))
    as_trainer = clients(run.server, "trainer", "sneaky", keys=str(tmp_path / "keys" / "w1"))
    with pytest.raises(RelayRefused, match="authorized as a worker, not as a trainer"):
        as_trainer.wait_connected(DEADLINE)
    as_worker = clients(run.server, "worker", "t1-worker", keys=str(tmp_path / "keys" / "t1"))
    with pytest.raises(RelayRefused, match="authorized as a trainer, not as a worker"):
        as_worker.wait_connected(DEADLINE)
    first = clients(run.server, "worker", "w1", keys=str(tmp_path / "keys" / "w1"))
    connected(first)
    impostor = clients(run.server, "worker", "w1", keys=str(tmp_path / "keys" / "w2"))
    with pytest.raises(RelayRefused, match="used by another client's key"):
        impostor.wait_connected(DEADLINE)
    assert [p.name for p in run.relay.peers.values()] == ["w1"]


def test_a_public_bind_needs_keys_or_insecure():
    with pytest.raises(ConfigError, match="--keys") as info:
        Relay(relay_options(bind="0.0.0.0:0"))
    assert "--insecure" in str(info.value)
    with pytest.warns(UserWarning, match="insecure"):
        relay = Relay(relay_options(bind="0.0.0.0:0", insecure=True))
    relay.close()


def test_missing_relay_keys_are_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="relayrl keys generate"):
        Relay(relay_options(keys=str(tmp_path)))


# ---------------------------------------------------------------- restart


def test_clients_survive_a_relay_restart_and_nothing_is_lost_or_repeated(make_relay, clients):
    first = make_relay()
    server = first.server
    trainer = clients(server, "trainer", "t")
    worker = clients(server, "worker", "w")
    connected(trainer, worker)
    trainer.publish_weights(4, wire.weights_to_bytes({"w": np.ones(2)}))
    for i in range(5):
        worker.send_samples(chunk(i), version=0, meta={})
    assert [m.seq for m in collect(trainer, 5)] == list(range(5))
    wait_until(lambda: worker.unacknowledged() == 0, "the backlog to drain before the restart")
    assert wait_until(worker.take_weights, "weights before the restart").version == 4

    first.shutdown()
    for i in range(5, 10):  # sent while the relay is down: kept in the backlog
        worker.send_samples(chunk(i), version=0, meta={})
    assert worker.unacknowledged() == 5
    second = start(relay_options(bind=server), attempts_s=DEADLINE)
    try:
        assert second.relay.session != first.relay.session
        wait_until(lambda: trainer.session == second.relay.session and trainer.connected.is_set(),
                   "the trainer to reconnect")
        wait_until(lambda: worker.session == second.relay.session and worker.connected.is_set(),
                   "the worker to reconnect")
        got = collect(trainer, 5)
        assert [(m.sender, m.seq) for m in got] == [("w", i) for i in range(5, 10)]
        np.testing.assert_array_equal(got[-1].arrays["obs"], chunk(9)["obs"])
        wait_until(lambda: worker.unacknowledged() == 0, "the backlog to drain after the restart")
        assert trainer.receive(0.5) == []
        # the trainer gave the new relay its current weights again
        wait_until(lambda: second.relay.weights is not None and second.relay.weights[0] == 4,
                   "the new relay to hold the trainer's weights")
    finally:
        second.shutdown()


def test_a_joining_worker_downloads_the_weights_once(make_relay, clients):
    run = make_relay()
    trainer = clients(run.server, "trainer", "t")
    connected(trainer)
    blob = wire.weights_to_bytes({"w": np.ones(250_000, np.float32)})  # 1 MB
    trainer.publish_weights(3, blob)
    wait_until(lambda: run.relay.weights is not None, "the relay to hold the weights")
    worker = clients(run.server, "worker", "w")
    assert wait_until(worker.take_weights, "the weights").version == 3
    time.sleep(1.0)  # several heartbeats: none may ask for the same weights again
    assert worker.take_weights() is None
    assert len(blob) < worker.stats["bytes_in"] < 1.5 * len(blob)
