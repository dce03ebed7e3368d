"""Relay back-pressure (``--overflow block``) and the clients' reconnect backoff: a real relay thread
on loopback, real RelayClients (test_relay_server's helpers), a slow trainer and a fast worker."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
import zmq

from relayrl.config import build_config
from relayrl.errors import ConfigError
from relayrl.net import wire
from relayrl.net.client import Backoff, RelayClient
from relayrl.net.relay import Relay
from test_relay_server import DEADLINE, chunk, clients, connected, make_relay, raw, relay_options, stats, wait_until  # noqa: F401

CHUNKS = 40


def slow_trainer_run(make_relay, clients, overflow: str):
    """A worker sends CHUNKS chunks at once into a relay queue of 4 (window 2); the trainer takes
    one chunk at a time, 20 ms apart. Returns (relay stats, worker, seqs in the order received)."""
    run = make_relay(max_queue=4, window=2, overflow=overflow)
    trainer = clients(run.server, "trainer", "t")
    worker = clients(run.server, "worker", "w", backlog=64, window=16)
    connected(trainer, worker)
    for i in range(CHUNKS):
        worker.send_samples(chunk(i), version=0, meta={"env_steps": 4})
    got: list[int] = []
    deadline = time.monotonic() + 3 * DEADLINE
    while worker.unacknowledged() and time.monotonic() < deadline:
        for msg in trainer.receive(0.2):
            time.sleep(0.02)  # a slow learner
            trainer.ack([msg])
            got.append(msg.seq)
    wait_until(lambda: worker.unacknowledged() == 0, "the worker's backlog to drain")
    return stats(run.relay), worker, got


def test_block_drops_nothing_while_the_trainer_is_alive_and_the_worker_pauses(make_relay, clients):
    s, worker, got = slow_trainer_run(make_relay, clients, "block")
    assert s["drops"] == 0 and worker.stats["relay_drops"] == 0 and worker.stats["backlog_drops"] == 0
    assert got == list(range(CHUNKS))  # every chunk once, in the worker's order
    assert s["held"] > 0 and s["pauses"] > 0
    assert worker.stats["pauses"] > 0 and worker.stats["blocked_s"] > 0
    assert worker.stats["acked"] == CHUNKS


def test_drop_oldest_under_the_same_load_drops_chunks(make_relay, clients):
    s, worker, got = slow_trainer_run(make_relay, clients, "drop-oldest")
    assert s["drops"] > 0 and worker.stats["relay_drops"] == s["drops"]
    assert len(got) == CHUNKS - s["drops"] and s["held"] == 0 and worker.stats["pauses"] == 0


def test_a_block_relay_refuses_a_worker_that_does_not_hold(make_relay, raw):
    run = make_relay(overflow="block", peer_timeout_s=30.0)
    old = raw(run.server, "old")
    old.send(wire.HELLO, meta={"role": "worker"})  # no meta.holds: a worker of wire protocol 3.1
    refused = old.expect(wire.REFUSED)
    assert "--overflow block" in refused.meta["reason"] and "release" in refused.meta["reason"]


def test_an_unknown_overflow_policy_is_a_config_error():
    with pytest.raises(ConfigError, match="--overflow drop-newest: the overflow policy is one of drop-oldest, block"):
        Relay(relay_options(overflow="drop-newest"))


def test_serve_with_a_bad_overflow_exits_2_with_one_line():
    out = subprocess.run([sys.executable, "-m", "relayrl", "serve", "--bind", "127.0.0.1:0", "--overflow", "lots"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "--overflow lots: the overflow policy is one of drop-oldest, block" in out.stderr


# ---------------------------------------------------------------- reconnect backoff


def hellos_heard(backoff: Backoff, window_s: float) -> int:
    """Hellos a worker sends in ``window_s`` to a relay that never answers (a ROUTER that only listens)."""
    sock = zmq.Context.instance().socket(zmq.ROUTER)
    sock.setsockopt(zmq.LINGER, 0)
    port = sock.bind_to_random_port("tcp://127.0.0.1")
    client = RelayClient(f"127.0.0.1:{port}", "worker", name="w", heartbeat_s=0.05, timeout_s=600, backoff=backoff)
    count, end = 0, time.monotonic() + window_s
    try:
        while (left := end - time.monotonic()) > 0:
            if sock.poll(int(left * 1000) + 1):
                msg = wire.decode(sock.recv_multipart()[1:])
                count += msg.type == wire.HELLO
    finally:
        client.close(timeout=0)
        sock.close()
    return count


def test_a_worker_retries_a_silent_relay_at_the_configured_pace():
    window = 3.0
    # 0, 0.05, 0.2, 0.65, then every 0.5 s: 8 hellos in 3 s (fewer only if the machine is slow)
    fast = hellos_heard(Backoff(initial=0.05, factor=3.0, maximum=0.5), window)
    # the defaults (0.2 s doubling to 30 s): 0, 0.2, 0.6, 1.4 (3.0 is at the window's edge)
    default = hellos_heard(Backoff(), window)
    assert 5 <= fast <= 4 + window / 0.5  # (load can only slow it: the upper bound holds regardless)
    assert 2 <= default <= 5 and default < fast


@pytest.mark.parametrize("sets, words", [
    (["net.reconnect_factor=0.5"], "factor >= 1"),
    (["net.reconnect_initial_s=5", "net.reconnect_max_s=1"], "maximum >= initial"),
])
def test_bad_reconnect_backoff_values_are_config_errors(sets, words):
    with pytest.raises(ConfigError, match=words):
        build_config("sac", None, sets, {})


def test_bad_reconnect_backoff_exits_2_in_the_cli(tmp_path):
    out = subprocess.run([sys.executable, "-m", "relayrl", "worker", "--server", "127.0.0.1:9", "--env",
                          "Pendulum-v1", "--algo", "sac", "--set", "net.reconnect_factor=0.5"],
                         capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "net.reconnect_factor" in out.stderr and "factor >= 1" in out.stderr


def test_a_relayrl_worker_process_pauses_for_a_slow_trainer_and_loses_nothing(make_relay, clients, tmp_path):
    """A real ``relayrl worker`` (expert: no weights needed) against a block relay whose queue holds 2
    chunks, and a trainer that takes a chunk every 30 ms: every env step arrives, none is dropped."""
    run = make_relay(max_queue=2, window=1, overflow="block")
    trainer = clients(run.server, "trainer", "t")
    connected(trainer)
    steps = 240  # 30 chunks of 8 steps
    worker = subprocess.Popen(
        [sys.executable, "-m", "relayrl", "worker", "--server", run.server, "--env", "Pendulum-v1", "--algo", "sac",
         "--expert", "--max-steps", str(steps), "--name", "w", "--set", "net.heartbeat_s=0.1",
         "--set", "env.num_envs=1", "--set", "sac.steps_per_iteration=8", "--set", "net.window=16",
         "--set", f"net.weights_dir={tmp_path / 'weights'}"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=tmp_path)
    try:
        got, deadline = 0, time.monotonic() + 6 * DEADLINE
        while got < steps and time.monotonic() < deadline:
            for msg in trainer.receive(0.2):
                time.sleep(0.03)  # a slow learner
                trainer.ack([msg])
                got += msg.meta["env_steps"]
        out, _ = worker.communicate(timeout=60)
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
    assert got == steps, out
    assert worker.returncode == 0, out
    s = stats(run.relay)
    assert s["drops"] == 0 and s["held"] > 0 and s["pauses"] > 0
    summary = next(line for line in out.splitlines() if line.startswith("worker done:"))
    assert "0 dropped by the relay" in summary and "0 dropped from the backlog" in summary
    pauses = int(summary.split(" pauses for a full relay queue")[0].rsplit(" ", 1)[1])
    assert pauses > 0, summary


def test_block_with_several_workers_and_a_trainer_that_dies_keeps_every_chunk_in_order(make_relay, clients, raw):
    """Three workers into a queue of 4; the first trainer (a raw socket) acknowledges 5 chunks, takes a
    6th and dies silently (no goodbye); after the relay's peer timeout the next trainer gets everything
    else, the 6th again, each worker's chunks in order, nothing dropped."""
    run = make_relay(max_queue=4, window=2, overflow="block", peer_timeout_s=1.0)
    workers = [clients(run.server, "worker", f"w{i}", backlog=64, window=16) for i in range(3)]
    first = raw(run.server, "t1")
    first.hello("trainer")
    connected(*workers)
    for i in range(15):
        for worker in workers:
            worker.send_samples(chunk(i), version=0, meta={"env_steps": 4})
    taken = []
    for _ in range(6):
        msg = first.expect(wire.SAMPLES)
        taken.append((msg.sender, msg.seq))
        if len(taken) < 6:  # the 6th is never acknowledged
            first.send(wire.ACK, meta={"acks": [[msg.sender, msg.incarnation, msg.seq]]})
    first.close()  # dies: no goodbye, no more pings
    wait_until(lambda: stats(run.relay)["trainer"] == 0, "the relay to drop the silent trainer")
    second = clients(run.server, "trainer", "t2")
    connected(second)
    got = []
    deadline = time.monotonic() + 3 * DEADLINE
    while any(w.unacknowledged() for w in workers) and time.monotonic() < deadline:
        for msg in second.receive(0.2):
            time.sleep(0.005)
            second.ack([msg])
            got.append((msg.sender, msg.seq))
    s = stats(run.relay)
    assert s["drops"] == 0 and s["held"] > 0 and all(w.stats["relay_drops"] == 0 for w in workers)
    assert not any(w.unacknowledged() for w in workers)
    delivered = taken[:5] + got  # the unacknowledged 6th came again, to the second trainer
    for worker in workers:
        seqs = [seq for name, seq in delivered if name == worker.name]
        assert seqs == list(range(15)), (worker.name, seqs)
