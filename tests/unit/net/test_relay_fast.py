"""The relay's fast path (wire protocol 3): a queue bounded in bytes, batched acks, header-only
checks that still refuse malformed chunks, and one clear refusal for a client of another protocol.
A real relay thread on loopback, spoken to by RelayClients and by hand (test_relay_server's helpers)."""

from __future__ import annotations

import gymnasium as gym
import msgpack
import numpy as np
import pytest
import zmq

from relayrl.config import build_config
from relayrl.errors import ConfigError, RelayRLError
from relayrl.net import wire
from relayrl.net.relay import Relay, RelayOptions
from relayrl.net.seen import Senders
from relayrl.net.backend import relay_pool
from test_relay_server import (DEADLINE, chunk, clients, collect, connected, make_relay, raw,  # noqa: F401
                               relay_options, start, stats, wait_until)


def big_chunk(i: int) -> dict[str, np.ndarray]:
    return {"obs": np.full((1280, 2), i, np.float32), "reward": np.full(1280, i, np.float32)}  # 15 KiB of arrays


def message_bytes(frames) -> int:
    return sum(memoryview(f).nbytes for f in frames)


def test_the_queue_is_bounded_in_bytes_and_its_drops_are_counted_with_their_bytes(make_relay, clients):
    worker_frames = lambda w, i: wire.encode(wire.SAMPLES, sender="w", incarnation=w.incarnation, seq=i,  # noqa: E731
                                             version=0, arrays=big_chunk(i), meta={"env_steps": 1280})
    size = message_bytes(worker_frames(type("W", (), {"incarnation": 2**62})(), 11))  # the largest of the 12
    run = make_relay(max_queue_mb=5.5 * size / 2**20)  # room for 5 chunks; max_queue (chunks) far above
    worker = clients(run.server, "worker", "w")
    connected(worker)
    for i in range(12):
        worker.send_samples(big_chunk(i), version=0, meta={"env_steps": 1280})
    wait_until(lambda: run.relay.counters["chunks_in"] == 12, "the relay to take 12 chunks")
    s = stats(run.relay)
    dropped = sum(message_bytes(worker_frames(worker, i)) for i in range(7))
    assert s["queue_depth"] == 5 and s["drops"] == 7 and s["dropped_bytes"] == dropped
    assert s["queue_bytes"] == sum(message_bytes(worker_frames(worker, i)) for i in range(7, 12))
    assert s["queue_bytes"] <= run.relay.max_queue_bytes
    wait_until(lambda: worker.stats["relay_drops"] == 7, "the worker to hear of the 7 drops")
    wait_until(lambda: worker.unacknowledged() == 5, "the worker to free the dropped chunks")
    trainer = clients(run.server, "trainer", "t")
    got = collect(trainer, 5)
    assert [m.seq for m in got] == [7, 8, 9, 10, 11]  # the oldest went; the rest in order
    np.testing.assert_array_equal(got[-1].arrays["obs"], big_chunk(11)["obs"])
    wait_until(lambda: worker.unacknowledged() == 0, "the worker's backlog to drain")
    assert stats(run.relay)["queue_bytes"] == 0


def test_one_trainer_ack_reaches_each_worker_as_one_ack_naming_all_its_chunks(make_relay, raw):
    run = make_relay(peer_timeout_s=30.0, window=1000)  # raw sockets do not ping
    workers = [raw(run.server, name) for name in ("a", "b")]
    trainer = raw(run.server, "t")
    trainer.hello("trainer")
    for w in workers:
        w.hello("worker")
        for seq in range(40):
            w.send(wire.SAMPLES, seq=seq, arrays=chunk(seq), meta={"env_steps": 4})
        w.sync()
    got = [trainer.expect(wire.SAMPLES) for _ in range(80)]
    for w in workers:  # in order per worker
        assert [m.seq for m in got if m.sender == w.name] == list(range(40))
    trainer.send(wire.ACK, meta={"acks": [[m.sender, m.incarnation, m.seq] for m in got]})
    for w in workers:
        acks = [m for m in w.drain() if m.type == wire.ACK]
        assert len(acks) == 1 and acks[0].meta["seqs"] == list(range(40))
    # a resend of a delivered chunk is acknowledged again (its first ack may have been lost), not forwarded
    workers[0].send(wire.SAMPLES, seq=3, arrays=chunk(3), meta={"env_steps": 4})
    assert workers[0].expect(wire.ACK).meta["seqs"] == [3]
    assert trainer.drain() == [] and run.relay.counters["duplicates"] == 1


def test_many_workers_chunks_reach_the_trainer_exactly_once_in_order_through_a_narrow_window(make_relay, clients):
    run = make_relay(window=4)  # most chunks wait in the queue; acks come back in batches
    workers = [clients(run.server, "worker", f"w{k}") for k in range(6)]
    trainer = clients(run.server, "trainer", "t")
    connected(trainer, *workers)
    for i in range(40):
        for w in workers:
            w.send_samples(chunk(i), version=0, meta={"env_steps": 4})
    got = collect(trainer, 240)
    for w in workers:
        assert [m.seq for m in got if m.sender == w.name] == list(range(40))
    for w in workers:
        wait_until(lambda w=w: w.unacknowledged() == 0, f"{w.name}'s backlog to drain")
    assert trainer.receive(0.3) == [] and stats(run.relay)["drops"] == 0


def test_a_chunk_whose_body_does_not_match_its_descriptors_is_rejected_and_counted(make_relay, clients, raw):
    run = make_relay(peer_timeout_s=30.0)
    trainer = clients(run.server, "trainer", "t")
    connected(trainer)
    w = raw(run.server, "w")
    w.hello("worker")
    header, body = wire.encode(wire.SAMPLES, sender="w", seq=0, arrays=chunk(0), meta={"env_steps": 4})
    body = bytes(body)
    w.send_frames([header, body[:-1]])  # one byte short
    w.send_frames([header, body[:32], body[32:]])  # an array per frame, as protocol 2 sent them
    w.sync()
    assert run.relay.causes.get("rejects/arrays") == 2 and run.relay.counters["chunks_in"] == 0
    assert trainer.receive(0.3) == []
    w.send_frames([header, body])  # the well-formed one is forwarded
    [msg] = collect(trainer, 1)
    np.testing.assert_array_equal(msg.arrays["reward"], chunk(0)["reward"])


def _hello_of(proto: int) -> bytes:
    return msgpack.packb({"proto": proto, "type": wire.HELLO, "sender": "old", "incarnation": 1, "seq": 0,
                          "version": -1, "arrays": [], "blob": False, "meta": {"role": "worker"}})


def test_a_client_of_the_previous_protocol_gets_one_refusal_it_can_read(make_relay, raw):
    run = make_relay(peer_timeout_s=30.0)
    old = raw(run.server, "old")
    old.send_frames([_hello_of(wire.PROTOCOL - 1)])
    assert old.sock.poll(int(DEADLINE * 1000))
    frames = old.sock.recv_multipart()
    assert len(frames) == 1  # no arrays: laid out as protocol 2 lays out a message
    header = msgpack.unpackb(frames[0])
    assert set(wire.HEADER_KEYS) <= set(header)  # everything a protocol-2 decoder requires
    assert header["proto"] == wire.PROTOCOL - 1 and header["type"] == wire.REFUSED
    reason = header["meta"]["reason"]
    assert f"protocol {wire.PROTOCOL}" in reason and f"speaks {wire.PROTOCOL - 1}" in reason
    assert "same relayrl release" in reason
    # anything else of another protocol is only counted: no answer to garbage, nothing forwarded
    ping = msgpack.unpackb(_hello_of(wire.PROTOCOL - 1))
    old.send_frames([msgpack.packb({**ping, "type": wire.PING})])
    old.send_frames([_hello_of(wire.PROTOCOL + 1)])  # a newer client is told the same way
    assert old.sock.poll(int(DEADLINE * 1000))
    assert msgpack.unpackb(old.sock.recv_multipart()[0])["proto"] == wire.PROTOCOL + 1
    assert old.sock.poll(300) == 0
    assert run.relay.causes["rejects/proto"] == 3 and run.relay.counters["refused"] == 2
    assert not run.relay.peers


def test_queue_bounds_and_window_that_are_not_positive_are_a_config_error():
    with pytest.raises(ConfigError, match="--max-queue-mb 0.0, --window 0: the relay's queue bounds"):
        Relay(RelayOptions(bind="127.0.0.1:0", max_queue_mb=0.0, window=0))


def test_a_relay_restart_mid_stream_loses_and_repeats_nothing_after_the_trainers_dedup(make_relay, clients):
    first = make_relay()
    server = first.server
    trainer = clients(server, "trainer", "t")
    workers = [clients(server, "worker", f"w{k}") for k in range(3)]
    connected(trainer, *workers)
    seen, firsts, repeats = Senders(), {w.name: [] for w in workers}, []

    def take(msgs, ack=True):
        for m in msgs:  # the trainer's dedup (RelayBackend._admit): first receipt of (worker, incarnation, seq)
            if seen.get(m.sender, m.incarnation).add(m.seq):
                firsts[m.sender].append(m.seq)
            else:
                repeats.append((m.sender, m.seq))
        if ack:
            trainer.ack(msgs)

    for i in range(10):
        for w in workers:
            w.send_samples(chunk(i), version=0, meta={})
    take(collect(trainer, 30, ack=False), ack=False)  # delivered, not acknowledged yet
    for i in range(10, 20):
        for w in workers:
            w.send_samples(chunk(i), version=0, meta={})
    first.shutdown()  # mid-stream: chunks in flight to the trainer, queued at the relay, unacknowledged
    for i in range(20, 30):  # sent while the relay is down: kept in the backlogs
        for w in workers:
            w.send_samples(chunk(i), version=0, meta={})
    take(trainer.receive(0.2))  # whatever had reached the trainer's socket (its ack is lost with the relay)
    second = start(relay_options(bind=server), attempts_s=DEADLINE)
    try:
        wait_until(lambda: all(len(firsts[w.name]) == 30 or take(trainer.receive(0.05)) for w in workers),
                   "every worker's 30 chunks at the trainer")
        for w in workers:
            wait_until(lambda w=w: w.unacknowledged() == 0 or take(trainer.receive(0.05)), f"{w.name}'s backlog")
            assert firsts[w.name] == list(range(30))  # each once, in order, after the dedup
            assert w.stats["relay_drops"] == 0 and w.stats["backlog_drops"] == 0
        # the first 30 were never acknowledged: their workers resent them to the new relay
        assert {(w.name, i) for w in workers for i in range(10)} <= set(repeats)
    finally:
        second.shutdown()


def test_a_trainer_that_gets_no_answer_names_the_protocol_it_speaks():
    """A relay of protocol 2 drops newer clients' messages without a word (it predates the refusal);
    the trainer's timeout says that a relay of another release is one reason."""
    silent = zmq.Context.instance().socket(zmq.ROUTER)  # takes every message, answers none
    silent.setsockopt(zmq.LINGER, 0)
    port = silent.bind_to_random_port("tcp://127.0.0.1")
    try:
        config = build_config("sac", None, ["net.heartbeat_s=0.1", "net.timeout_s=2", "net.connect_timeout_s=1"],
                              {"net.server": f"127.0.0.1:{port}"})
        source = relay_pool(config, *_pendulum_spaces())
        with pytest.raises(RelayRLError, match=f"no answer from the relay .*wire protocol {wire.PROTOCOL}"):
            source.backend.connect()
        assert silent.poll(0)  # its hellos did arrive
    finally:
        silent.close()


def _pendulum_spaces():
    return gym.spaces.Box(-8, 8, (3,), np.float32), gym.spaces.Box(-2, 2, (1,), np.float32)
