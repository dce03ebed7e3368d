"""The trainer's end of the relay: RelayBackend dedup, checks, hooks, and its errors."""

from __future__ import annotations

import sys
import time
import types

import gymnasium as gym
import numpy as np
import pytest

from relayrl.config import build_config
from relayrl.errors import RelayRLError
from relayrl.net import wire
from relayrl.net.client import RelayClient
from relayrl.net.compress import ActionBufferCompressor
from relayrl.net.seen import WINDOW
from relayrl.net.backend import relay_pool
from relayrl.net.chunk_checks import crc_of
from relayrl.testing.relay import deliver, running_relay

OBS = gym.spaces.Box(-1, 1, (4,), np.float32)  # 2 obs entries + an action buffer of 2 x 1
ACT = gym.spaces.Box(-1, 1, (1,), np.float32)


def transitions(n: int, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    obs = rng.random((n, 4), dtype=np.float32)
    action = rng.random((n, 1), dtype=np.float32)
    next_obs = np.concatenate([rng.random((n, 2), dtype=np.float32), obs[:, 3:], action], axis=1)
    return {"obs": obs, "action": action, "reward": rng.random(n, dtype=np.float32), "next_obs": next_obs,
            "terminated": np.zeros(n, bool), "discount": np.full(n, 0.99, np.float32)}


def source_config(address: str, *sets: str):
    return build_config("sac", None, ["net.heartbeat_s=0.1", "net.timeout_s=2", "net.connect_timeout_s=5", *sets],
                        {"net.server": address})


def message(sender: str, seq: int, batch: dict, meta: dict | None = None, incarnation: int = 0) -> wire.Message:
    return wire.decode(wire.encode(wire.SAMPLES, sender=sender, incarnation=incarnation, seq=seq, version=0,
                                   arrays=batch, meta={"env_steps": len(batch["action"]), **(meta or {})}))


@pytest.fixture
def relay():
    with running_relay() as r:
        yield r


def test_pull_delivers_worker_chunks_and_acknowledges_them(relay):
    source = relay_pool(source_config(relay.address), OBS, ACT)
    worker = RelayClient(relay.address, "worker", name="w0", heartbeat_s=0.1, timeout_s=2)
    try:
        source.reset(0)
        assert worker.wait_connected(5)
        sent = [transitions(8, seed=k) for k in range(3)]
        for batch in sent:
            worker.send_samples(batch, version=0, meta={"env_steps": 8, "returns": [-3.5], "lengths": [200]})
        rows, steps, deadline = [], 0, time.monotonic() + 10
        while steps < 24 and time.monotonic() < deadline:
            batch, got = source.pull()
            steps += got
            if batch:
                rows.append(batch["obs"])
        np.testing.assert_array_equal(np.concatenate(rows), np.concatenate([b["obs"] for b in sent]))
        assert source.pop_episodes() == ([-3.5] * 3, [200] * 3)
        deadline = time.monotonic() + 5
        while worker.unacknowledged() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert worker.unacknowledged() == 0
    finally:
        worker.close()
        source.close()


def test_a_chunk_seen_before_is_acknowledged_but_not_learned_twice(relay):
    source = relay_pool(source_config(relay.address), OBS, ACT)
    try:
        first = message("w0", 0, transitions(4))
        batch, steps = deliver(source, [first, message("w0", 1, transitions(4, 1))])
        assert len(batch["reward"]) == 8 and steps == 8
        batch, steps = deliver(source, [first])  # a resend after a relay restart
        assert batch == {} and steps == 0
        assert source.backend.counts["duplicates"] == 1
    finally:
        source.close()


def test_a_restarted_worker_reusing_its_name_is_learned_from_and_its_old_process_forgotten(relay):
    source = relay_pool(source_config(relay.address), OBS, ACT)
    try:
        old = [message("w0", s, transitions(2, s), incarnation=100) for s in range(3)]
        new = [message("w0", s, transitions(2, 10 + s), incarnation=200) for s in range(3)]  # seqs from 0 again
        assert deliver(source, old)[1] == 6
        batch, steps = deliver(source, new)
        assert steps == 6
        np.testing.assert_array_equal(batch["obs"], np.concatenate([m.arrays["obs"] for m in new]))
        # a repeat of the new process's chunk, and two of a process since replaced (a second live
        # process under that name: the relay delivers in order, so a restart never gets here)
        batch, steps = deliver(source, [new[1], old[2], message("w0", 3, transitions(2), incarnation=100)])
        assert batch == {} and steps == 0
        assert (source.backend.counts["duplicates"], source.backend.counts["stale"], source.counts["chunks"]) == (1, 2, 6)
        stats = source.stats()
        assert stats["net/stale"] == 2 and stats["net/workers_seen"] == 1
    finally:
        source.close()


def test_memory_of_seen_chunks_stays_bounded_after_a_gap(relay):
    """Seq 1 was dropped by the relay's queue (or a worker's backlog): it never comes, and 10,000
    chunks after it must not be remembered one by one."""
    source = relay_pool(source_config(relay.address), OBS, ACT)
    try:
        one = transitions(1)
        deliver(source, [message("w0", 0, one)])
        worst = 0
        for start in range(2, 10_002, 500):
            deliver(source, [message("w0", s, one) for s in range(start, start + 500)])
            worst = max(worst, len(source.backend.seen.get("w0", 0)))
        assert worst <= WINDOW and source.counts["chunks"] == 10_001 and source.backend.counts["duplicates"] == 0
    finally:
        source.close()


def test_chunks_that_do_not_fit_the_env_are_rejected_and_reported_once(relay, capsys):
    source = relay_pool(source_config(relay.address), OBS, ACT)
    try:
        bad = transitions(4)
        bad["obs"] = np.zeros((4, 7), np.float32)
        batch, steps = deliver(source, [message("w9", 0, bad), message("w9", 1, bad)])
        assert batch == {} and source.backend.counts["refused"] == 2
        assert steps == 0  # a refused chunk contributes nothing, its env steps neither (they would drive
        # the update schedule and total_steps with data the learner never sees)
        err = capsys.readouterr().err
        assert err.count("refused chunk 0 of worker 'w9' (shape)") == 1 and "width 7, expected 4" in err
        missing = {k: v for k, v in transitions(4).items() if k != "reward"}
        deliver(source, [message("w8", 0, missing)])
        assert source.backend.counts["refused"] == 3 and source.backend.refused == {"shape": 2, "missing": 1}
    finally:
        source.close()


def test_action_buffer_compressor_round_trip_passes_crc_debug(relay, monkeypatch):
    codec = ActionBufferCompressor(act_buf_len=2)
    module = types.ModuleType("relayrl_test_hooks")
    module.decompress = codec.decompress
    monkeypatch.setitem(sys.modules, "relayrl_test_hooks", module)
    source = relay_pool(source_config(relay.address, "net.decompressor=relayrl_test_hooks:decompress",
                                       "net.crc_debug=true"), OBS, ACT)
    try:
        original = transitions(16)
        sent = codec.compress(original)
        assert "next_obs" not in sent and sent["next_obs_head"].shape == (16, 2)
        batch, _ = deliver(source, [message("w0", 0, sent, {"crc": crc_of(original)})])
        for key, value in original.items():
            np.testing.assert_array_equal(batch[key], value)
    finally:
        source.close()


def test_a_chunk_the_decompressor_cannot_take_is_refused_not_fatal(relay, monkeypatch, capsys):
    """A worker without the trainer's net.compressor sends plain chunks: the trainer's decompressor
    fails on them; the chunk is refused (cause decompress), the trainer goes on."""
    module = types.ModuleType("relayrl_test_codec")
    module.decompress = ActionBufferCompressor(act_buf_len=2).decompress
    monkeypatch.setitem(sys.modules, "relayrl_test_codec", module)
    source = relay_pool(source_config(relay.address, "net.decompressor=relayrl_test_codec:decompress"), OBS, ACT)
    try:
        batch, steps = deliver(source, [message("w0", 0, transitions(4))])  # no next_obs_head
        assert batch == {} and steps == 0 and source.backend.refused == {"decompress": 1}
        assert "net.decompressor relayrl_test_codec:decompress failed on it (KeyError" in capsys.readouterr().err
        good = ActionBufferCompressor(act_buf_len=2).compress(transitions(4))
        batch, steps = deliver(source, [message("w0", 1, good)])
        assert len(batch["reward"]) == 4 and steps == 4
    finally:
        source.close()


def test_crc_debug_names_the_field_a_wrong_decompressor_breaks(relay, monkeypatch):
    def lossy(batch):
        out = ActionBufferCompressor(2).decompress(batch)
        out["next_obs"] = out["next_obs"] + 1e-3
        return out

    module = types.ModuleType("relayrl_test_lossy")
    module.decompress = lossy
    monkeypatch.setitem(sys.modules, "relayrl_test_lossy", module)
    source = relay_pool(source_config(relay.address, "net.decompressor=relayrl_test_lossy:decompress",
                                       "net.crc_debug=true"), OBS, ACT)
    try:
        original = transitions(8)
        with pytest.raises(RelayRLError, match="next_obs"):
            deliver(source, [message("w0", 0, ActionBufferCompressor(2).compress(original),
                                     {"crc": crc_of(original)})])
    finally:
        source.close()


def test_no_relay_is_a_clear_error():
    source = relay_pool(source_config("127.0.0.1:1", "net.connect_timeout_s=1"), OBS, ACT)
    with pytest.raises(RelayRLError, match="relayrl serve"):
        source.reset(0)


@pytest.mark.parametrize("algo, sets, says", [
    ("ppo", ["backend=mp"], "not from --backend mp: drop --backend"),
    ("sac", ["workers=2"], "drop --workers"),
])
def test_what_a_relay_trainer_cannot_do_is_refused_before_connecting(algo, sets, says):
    from relayrl.errors import ConfigError
    from relayrl.net.backend import make_relay_source

    config = build_config(algo, None, sets, {"net.server": "127.0.0.1:1"})
    with pytest.raises(ConfigError, match=says):
        make_relay_source(config)


def test_chunks_more_than_max_policy_lag_versions_old_are_counted_not_learned(relay):
    source = relay_pool(source_config(relay.address, "max_policy_lag=2"), OBS, ACT)
    try:
        source.version = 5  # the learner has published version 5
        old = wire.decode(wire.encode(wire.SAMPLES, sender="w0", incarnation=0, seq=0, version=2,
                                      arrays=transitions(4), meta={"env_steps": 4}))
        fresh = wire.decode(wire.encode(wire.SAMPLES, sender="w0", incarnation=0, seq=1, version=3,
                                        arrays=transitions(4, 1), meta={"env_steps": 4}))
        batch, steps = deliver(source, [old, fresh])
        assert steps == 8  # the env steps of both count toward the run
        np.testing.assert_array_equal(batch["obs"], fresh.arrays["obs"])  # only the fresh one is learned from
        stats = source.stats()
        assert stats["workers/too_old"] == 1 and stats["workers/lag_max"] == 3
    finally:
        source.close()
