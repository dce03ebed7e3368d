"""Chunks that are wire-valid but unusable: refused (acknowledged with the reason), counted by cause,
logged once per worker and cause, and the worker told. Real ZeroMQ sockets on 127.0.0.1: a relay in
a thread, the trainer's relay pool and a worker's RelayClient. Waits poll a condition with a
generous deadline; nothing asserts on timing."""

from __future__ import annotations

import io
import threading
import time
from contextlib import contextmanager

import gymnasium as gym
import msgpack
import numpy as np
import pytest
import zmq

from relayrl.config import build_config
from relayrl.net import client as net_client
from relayrl.net import chunk_checks
from relayrl.net import wire
from relayrl.net.client import RelayClient
from relayrl.net.relay import Relay, RelayOptions
from relayrl.envs.space_data import space_to_data
from relayrl.net.backend import relay_pool
from relayrl.testing.relay import deliver

OBS = gym.spaces.Box(-1, 1, (3,), np.float32)  # Pendulum-v1's spaces
ACT = gym.spaces.Box(-2, 2, (1,), np.float32)
DEADLINE = 10.0


def wait_until(condition, what: str, timeout: float = DEADLINE):
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.01)
    return value


def relay_stats_of(relay: Relay) -> dict:
    """``relay.stats()`` read from the test's thread (it iterates the peers the relay thread changes)."""
    while True:
        try:
            return relay.stats()
        except RuntimeError:  # dictionary changed size during iteration
            time.sleep(0.001)


def transitions(n: int) -> dict[str, np.ndarray]:
    """A chunk exactly as a relayrl SAC worker on Pendulum-v1 sends it."""
    rng = np.random.default_rng(n)
    return {"obs": rng.random((n, 3), dtype=np.float32), "action": rng.random((n, 1), dtype=np.float32),
            "reward": rng.random(n, dtype=np.float32), "next_obs": rng.random((n, 3), dtype=np.float32),
            "terminated": np.zeros(n, bool), "discount": np.full(n, 0.99, np.float32)}


class Log(io.StringIO):
    """The relay's log, written by its thread and read by the test's."""


@contextmanager
def relay_with_log(**options):
    log = Log()
    relay = Relay(RelayOptions(**{"bind": "127.0.0.1:0", "heartbeat_s": 0.1, "peer_timeout_s": 30.0,
                                  "metrics_every_s": 3600.0, **options}))
    relay.address = relay.endpoint.removeprefix("tcp://")
    stop = threading.Event()
    thread = threading.Thread(target=relay.serve, args=(stop, log), daemon=True)
    thread.start()
    try:
        yield relay, log
    finally:
        stop.set()
        thread.join(timeout=10)


@pytest.fixture
def setup():
    """(relay, relay log, trainer source, worker client), all connected."""
    with relay_with_log() as (relay, log):
        config = build_config("sac", None, ["net.heartbeat_s=0.1", "net.timeout_s=5", "net.connect_timeout_s=10"],
                              {"net.server": relay.address, "env.id": "Pendulum-v1"})
        source = relay_pool(config, OBS, ACT)
        worker = RelayClient(relay.address, "worker", name="robot-7", heartbeat_s=0.1, timeout_s=5)
        try:
            source.reset(0)
            assert worker.wait_connected(DEADLINE)
            yield relay, log, source, worker
        finally:
            worker.close(timeout=0.5)
            source.close()


def _bad(cause_case: str) -> tuple[dict, dict]:
    """(arrays, meta) of a wire-valid chunk the trainer (or the relay) cannot use."""
    batch, meta = transitions(4), {"env_steps": 4}
    if cause_case == "obs width":
        batch["obs"] = np.zeros((4, 5), np.float32)
    elif cause_case == "arrays missing":
        del batch["next_obs"], batch["discount"]
    elif cause_case == "row counts differ":
        batch["reward"] = batch["reward"][:3]
    elif cause_case == "zero rows":
        batch, meta = transitions(0), {"env_steps": 0}
    elif cause_case == "other dtype":
        batch["obs"] = batch["obs"].astype(np.float64)
    elif cause_case == "extra array":
        batch["secret"] = np.zeros(4, np.int32)
    elif cause_case == "env_steps -1000":
        meta = {"env_steps": -1000}
    elif cause_case == "env_steps '12'":
        meta = {"env_steps": "12"}
    elif cause_case == "env_steps 1.5":
        meta = {"env_steps": 1.5}
    elif cause_case == "env_steps missing":
        meta = {}
    elif cause_case == "NaN reward":
        batch["reward"][2] = np.nan
    elif cause_case == "other action bounds":  # same shapes, another env: only meta.spaces tells
        meta["spaces"] = {"observation": space_to_data(OBS), "action": space_to_data(gym.spaces.Box(-1, 1, (1,)))}
    elif cause_case == "bad spaces":
        meta["spaces"] = {"observation": {"type": "Graph"}, "action": space_to_data(ACT)}
    elif cause_case == "moments to sac":  # a worker that normalises observations, a trainer that does not
        meta["obs_moments"] = {"count": 4.0, "mean": [0.0] * 3, "var": [1.0] * 3}
    else:
        raise AssertionError(cause_case)
    return batch, meta


# (case, who refuses, cause, what the message says was expected and what came)
CASES = [
    ("obs width", "trainer", "shape", "observation width 5, expected 3 (Pendulum-v1"),
    ("arrays missing", "trainer", "missing", "lacks ['next_obs', 'discount']"),
    ("row counts differ", "trainer", "rows", "reward 3"),
    ("zero rows", "trainer", "empty", "0 rows"),
    ("other dtype", "trainer", "dtype", "obs has dtype float64, expected float32"),
    ("extra array", "trainer", "extra", "['secret'], which the trainer does not know"),
    ("env_steps -1000", "relay", "env_steps", "env_steps is -1000, outside [0, 2**63)"),
    ("env_steps '12'", "relay", "env_steps", "env_steps is '12' (str), not an integer"),
    ("env_steps 1.5", "relay", "env_steps", "env_steps is 1.5 (float), not an integer"),
    ("env_steps missing", "trainer", "env_steps", "no meta.env_steps"),
    ("NaN reward", "trainer", "nonfinite", "1 of its 4 reward values are not finite"),
    ("other action bounds", "trainer", "spaces", "action Box(-1.0, 1.0, (1,), float32); the trainer's are "
                                                 "observation Box(-1.0, 1.0, (3,), float32), action Box(-2.0, 2.0"),
    ("bad spaces", "trainer", "spaces", "unknown space type 'Graph'"),
    ("moments to sac", "trainer", "moments", "the trainer's sac policy does not"),
]


@pytest.mark.parametrize("case, refuser, cause, says", CASES, ids=[c[0] for c in CASES])
def test_an_unusable_chunk_is_refused_counted_logged_once_and_the_worker_told(setup, capsys, case, refuser,
                                                                              cause, says):
    relay, relay_log, source, worker = setup
    arrays, meta = _bad(case)
    for _ in range(2):
        worker.send_samples(arrays, version=0, meta=meta)
    good = transitions(6)
    worker.send_samples(good, version=0, meta={"env_steps": 6})  # the next good chunk is learned from
    rows, steps = [], 0
    deadline = time.monotonic() + DEADLINE
    while steps < 6:
        assert time.monotonic() < deadline, "the good chunk did not reach the trainer"
        batch, got = source.pull()
        steps += got
        if batch:
            rows.append(batch["obs"])
    np.testing.assert_array_equal(np.concatenate(rows), good["obs"])  # the refused ones added nothing
    # the worker hears why, for both chunks, and forgets them (they are acknowledged, never resent)
    wait_until(lambda: worker.stats["chunks_refused"] == 2 and worker.unacknowledged() == 0,
               "the worker to hear of both refusals")
    assert worker.chunk_refusals == {cause: 2} and worker.stats["acked"] == 3
    stats = source.stats()
    if refuser == "trainer":
        assert source.backend.counts["refused"] == 2 and source.backend.refused == {cause: 2}
        assert stats["net/refused"] == 2 and stats[f"net/refused/{cause}"] == 2
        assert relay.counters["chunks_refused"] == 0
    else:  # the relay refuses what the protocol rules out; the trainer never sees it
        assert source.backend.counts["refused"] == 0 and "net/refused/env_steps" not in stats
        relay_stats = relay_stats_of(relay)
        assert relay_stats["chunks_refused"] == 2 and relay_stats["chunks_refused/env_steps"] == 2
        assert relay.counters["chunks_in"] == 1  # only the good one was queued
    assert source.env_steps == 6 and source.counts["chunks"] == 1
    err = capsys.readouterr().err
    # the refuser logs the first refusal of each cause from each worker, naming the worker and the cause
    log = err if refuser == "trainer" else relay_log.getvalue()
    header = (f"relayrl: refused chunk 0 of worker 'robot-7' ({cause})" if refuser == "trainer"
              else f"relay: refused chunk 0 of worker 'robot-7' ({cause})")
    assert log.count(header) == 1 and says in log
    assert log.count("refused chunk") == 1  # not again for chunk 1
    # the worker prints once why its samples are not used, with the fix
    told = [line for line in err.splitlines() if line.startswith("relayrl worker robot-7:")]
    assert len(told) == 1, err
    assert f"chunk 0 was refused ({cause}), its samples are not used: the {refuser} refused it" in told[0]
    assert says in told[0]
    assert "run " in told[0] or "fix " in told[0] or "check " in told[0]  # names the fix


def test_each_cause_is_logged_once_per_worker(setup, capsys):
    """A second worker with the same problem is logged again; a second problem of one worker too."""
    relay, _, source, worker = setup
    other = RelayClient(relay.address, "worker", name="robot-8", heartbeat_s=0.1, timeout_s=5)
    try:
        assert other.wait_connected(DEADLINE)
        wide, _ = _bad("obs width")
        nan, _ = _bad("NaN reward")
        for client in (worker, other, worker):
            client.send_samples(wide, version=0, meta={"env_steps": 4})
        worker.send_samples(nan, version=0, meta={"env_steps": 4})
        wait_until(lambda: source.pull() and source.backend.counts["refused"] == 4, "four refusals")
        wait_until(lambda: worker.stats["chunks_refused"] == 3 and other.stats["chunks_refused"] == 1,
                   "both workers to hear")
    finally:
        other.close(timeout=0.5)
    err = capsys.readouterr().err
    assert err.count("of worker 'robot-7' (shape)") == 1 and err.count("of worker 'robot-8' (shape)") == 1
    assert err.count("of worker 'robot-7' (nonfinite)") == 1
    assert source.backend.refused == {"shape": 3, "nonfinite": 1}
    assert worker.chunk_refusals == {"shape": 2, "nonfinite": 1} and other.chunk_refusals == {"shape": 1}
    assert err.count("relayrl worker robot-7: chunk") == 2 and err.count("relayrl worker robot-8: chunk") == 1


@pytest.mark.parametrize("env_steps, says", [(-1000, "outside [0, 2**63)"), ("12", "not an integer"),
                                             (1.5, "not an integer"), (True, "not an integer"),
                                             (2**63, "outside")])
def test_the_trainer_refuses_bad_env_steps_an_older_relay_let_through(setup, env_steps, says):
    """A relay of protocol 2.0 forwards any env_steps: the trainer checks them itself."""
    _, _, source, _ = setup
    msg = wire.decode(wire.encode(wire.SAMPLES, sender="old-relay-worker", seq=0, arrays=transitions(2),
                                  meta={"env_steps": env_steps}))
    batch, steps = deliver(source, [msg])
    assert batch == {} and steps == 0 and source.backend.refused == {"env_steps": 1}


def test_a_chunk_with_no_arrays_carries_env_steps_and_is_not_refused(setup):
    """n-step collection can take env steps that complete no transition yet: a relayrl worker then
    sends a chunk without arrays (not one with 0-row arrays)."""
    _, _, source, worker = setup
    worker.send_samples({}, version=0, meta={"env_steps": 3, "returns": [-5.0], "lengths": [200]})
    worker.send_samples(transitions(2), version=0, meta={"env_steps": 2})
    steps, deadline = 0, time.monotonic() + DEADLINE
    while steps < 5 and time.monotonic() < deadline:
        steps += source.pull()[1]
    assert steps == 5 and source.backend.counts["refused"] == 0 and source.counts["chunks"] == 2
    assert source.pop_episodes() == ([-5.0], [200])


def test_observations_come_in_their_stored_dtype_or_the_envs_own():
    """A float64 env (MuJoCo's): this release's workers send float32 (data/dtypes.py), earlier ones
    float64, and replay stores both as float32; uint8 is another env's."""
    with relay_with_log() as (relay, _):
        config = build_config("sac", None, ["net.heartbeat_s=0.1"], {"net.server": relay.address,
                                                                     "env.id": "InvertedPendulum-v5"})
        source = relay_pool(config, gym.spaces.Box(-1, 1, (3,), np.float64), ACT)
        worker = RelayClient(relay.address, "worker", name="mujoco", heartbeat_s=0.1)
        try:
            source.reset(0)
            assert worker.wait_connected(DEADLINE)
            for dtype in (np.float32, np.float64, np.uint8):
                chunk = transitions(2)
                chunk["obs"], chunk["next_obs"] = chunk["obs"].astype(dtype), chunk["next_obs"].astype(dtype)
                worker.send_samples(chunk, version=0, meta={"env_steps": 2})
            deadline = time.monotonic() + DEADLINE
            while source.counts["chunks"] + source.backend.counts["refused"] < 3 and time.monotonic() < deadline:
                source.pull()
            wait_until(lambda: worker.stats["chunks_refused"] == 1 and worker.stats["acked"] == 3, "the acks")
        finally:
            worker.close(timeout=0.5)
            source.close()
    assert source.counts["chunks"] == 2 and source.backend.refused == {"dtype": 1} and source.env_steps == 4
    assert worker.chunk_refusals == {"dtype": 1}


def test_refusals_cover_every_cause_the_trainer_names():
    assert {c[2] for c in CASES} == set(chunk_checks.CAUSES) - {"decompress"}  # (decompress: tests/unit/net/test_trainer.py)


# ---------------------------------------------------------------- the relay: what the spec rules out


def _raw_header(**fields) -> bytes:
    header = {"proto": wire.PROTOCOL, "type": wire.PING, "sender": "raw", "incarnation": 0, "seq": 0, "version": -1,
              "arrays": [], "blob": False, "meta": {}}
    header.update(fields)
    return msgpack.packb({k: v for k, v in header.items() if v is not ...}, use_bin_type=True)


class Raw:
    """A DEALER that speaks the protocol by hand."""

    def __init__(self, address: str, name: str):
        self.name = name
        self.sock = zmq.Context.instance().socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.connect(f"tcp://{address}")

    def send(self, *frames) -> None:
        self.sock.send_multipart(list(frames))

    def expect(self, kind: str) -> wire.Message:
        deadline = time.monotonic() + DEADLINE
        while time.monotonic() < deadline:
            if self.sock.poll(50):
                msg = wire.decode(self.sock.recv_multipart())
                if msg.type == kind:
                    return msg
        raise AssertionError(f"{self.name}: no {kind}")

    def close(self) -> None:
        self.sock.close(linger=0)


def test_the_relay_rejects_what_the_protocol_rules_out_and_counts_it_by_cause():
    with relay_with_log() as (relay, _):
        raw = Raw(relay.address, "w")
        try:
            raw.send(_raw_header(type=wire.HELLO, sender="w", meta={"role": "worker"}))
            raw.expect(wire.WELCOME)
            chunk = transitions(2)
            frames = wire.encode(wire.SAMPLES, sender="w", arrays=chunk, meta={"env_steps": 2})
            descriptors = msgpack.unpackb(frames[0])["arrays"]
            bad = [
                _raw_header(proto=float(wire.PROTOCOL)),  # a float that equals ours
                _raw_header(proto=wire.PROTOCOL + 1),
                _raw_header(sender=...),  # pings without their fields
                _raw_header(meta=..., arrays=..., blob=...),
                _raw_header(version=...),
                _raw_header(blob=0),
            ]
            for header in bad:
                raw.send(header)
            for seq in (2**63, 2**64 - 1, -1):  # chunks numbered outside [0, 2**63)
                raw.send(_raw_header(type=wire.SAMPLES, sender="w", seq=seq, arrays=descriptors,
                                     meta={"env_steps": 2}), *frames[1:])
            raw.send(_raw_header())
            raw.expect(wire.PONG)  # everything before it was handled
            assert relay.counters["rejects"] == 9 and relay.counters["chunks_in"] == 0 and len(relay.queue) == 0
            assert relay.causes == {"rejects/proto": 2, "rejects/header": 7}
            stats = relay_stats_of(relay)
            assert stats["rejects/proto"] == 2 and stats["rejects/header"] == 7
            # a chunk with a negative env_steps is refused *to the worker*: acknowledged, with the reason
            raw.send(_raw_header(type=wire.SAMPLES, sender="w", seq=5, arrays=descriptors,
                                 meta={"env_steps": -1}), *frames[1:])
            ack = raw.expect(wire.ACK)
            assert ack.meta["seqs"] == [5] and ack.meta["refusals"][0][:2] == [5, "env_steps"]
            assert "env_steps is -1" in ack.meta["refusals"][0][2]
            assert relay.counters["chunks_refused"] == 1 and relay.counters["chunks_in"] == 0
            raw.send(_raw_header(type=wire.SAMPLES, sender="w", seq=5, arrays=descriptors,
                                 meta={"env_steps": 2}), *frames[1:])  # a resend: acknowledged, not taken
            assert raw.expect(wire.ACK).meta == {"seqs": [5]}
            assert relay.counters["chunks_in"] == 0 and relay.counters["duplicates"] == 1
        finally:
            raw.close()


def test_the_relay_rejects_a_trainer_ack_with_malformed_refusals():
    with relay_with_log() as (relay, _):
        trainer = Raw(relay.address, "t")
        try:
            trainer.send(_raw_header(type=wire.HELLO, sender="t", meta={"role": "trainer"}))
            trainer.expect(wire.WELCOME)
            for refusals in (5, [["w", 0, 1, "shape"]], [["w", 0, 1, "", "why"]], [["w", 0, 1, "x" * 33, "why"]],
                             [["w", 0, -1, "shape", "why"]], [["w", 0, 1, "shape", "y" * 601]], [[1, 0, 1, "a", "b"]]):
                trainer.send(_raw_header(type=wire.ACK, sender="t", meta={"acks": [], "refusals": refusals}))
            trainer.send(_raw_header(sender="t"))
            trainer.expect(wire.PONG)
            assert relay.counters["rejects"] == 7 and relay.causes == {"rejects/ack": 7}
        finally:
            trainer.close()


def test_acks_and_refusals_are_split_into_messages_the_relay_accepts():
    """1000 acks of 256-character worker names were one 270 KB header, over the 64 KiB limit: the
    relay rejected it and the workers resent their chunks forever."""
    name = "n" * 256
    acks = [[name, 2**62, seq] for seq in range(3000)]
    refusals = [[name, 2**62, seq, "shape", "d" * wire.MAX_DETAIL] for seq in range(0, 3000, 10)]
    seen_acks, seen_refusals, left = [], [], list(refusals)
    for start, end, count in net_client._ack_batches(acks, refusals):
        meta = {"acks": acks[start:end], "refusals": left[:count]}
        left = left[count:]
        header = wire.encode(wire.ACK, sender="t", meta=meta)[0]
        assert len(header) <= wire.MAX_HEADER_BYTES
        wire.decode([header])
        seen_acks += meta["acks"]
        seen_refusals += meta["refusals"]
    assert seen_acks == acks and seen_refusals == refusals
