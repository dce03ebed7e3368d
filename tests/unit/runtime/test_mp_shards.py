"""Replay shards as real processes (backends/mp_shards.py), driven by the learner's ReplayService."""

import os
import signal
import time

import numpy as np
import pytest

from relayrl.runtime.backends.mp import process_context
from relayrl.runtime.backends.mp_shards import MpShards
from relayrl.runtime.messages import InsertTransitions
from relayrl.runtime.service import ReplayService, ShardLost
from relayrl.runtime.shard import ShardOptions


def chunk(worker, start, n, obs_dtype=np.float32):
    ids = np.arange(start, start + n)
    batch = {"obs": ids.astype(obs_dtype)[:, None], "reward": np.zeros(n, np.float32)}
    return InsertTransitions(worker, start, 0, batch, n)


def gone(pid, seconds=5.0):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    return False


@pytest.fixture
def service():
    shards = MpShards(ShardOptions(capacity=1000, sampler="prioritized"), 2, process_context(shards=True))
    out = ReplayService(shards, batch_size=16, prioritized=True, heartbeat_s=0.0, timeout_s=20.0)
    out.start()
    yield out
    out.stop()
    shards.close()


def wait_for_size(service, size, seconds=20.0):
    deadline = time.monotonic() + seconds
    while len(service) < size and time.monotonic() < deadline:
        service.check()
        time.sleep(0.02)
    return len(service)


def test_channel_inserts_reach_each_shard_process_and_samples_come_from_both(service):
    shards = service.shards
    assert shards.channel_of(0) is shards.channels[0] and shards.channel_of(3) is shards.channels[1]
    assert shards.channel_of(0).put(chunk(0, 0, 30), timeout=5.0)  # as worker 0 does
    assert shards.channel_of(1).put(chunk(1, 100, 30), timeout=5.0)  # worker 1
    assert wait_for_size(service, 60) == 60
    stats = service.stats()
    assert stats["replay/shard0_size"] == 30 and stats["replay/shard1_size"] == 30
    got = np.concatenate([service.sample(16)["obs"][:, 0] for _ in range(10)])
    assert (got < 30).any() and (got >= 100).any()
    sample = service.sample(16)
    service.update_priorities(sample["index"], np.full(16, 100.0))  # answered later, in call order
    service.check()
    assert service.stats()["replay/priority_skipped"] == 0


def test_a_killed_shard_process_is_restarted_from_its_snapshot_on_the_same_channel(service, tmp_path):
    shards = service.shards
    shards.channels[0].put(chunk(0, 0, 20), timeout=5.0)
    shards.channels[1].put(chunk(1, 100, 20), timeout=5.0)
    wait_for_size(service, 40)
    service.save(tmp_path / "replay.safetensors")  # each shard process writes its snapshot
    shards.channels[1].put(chunk(1, 120, 5), timeout=5.0)  # 5 more after the snapshot
    wait_for_size(service, 45)
    old = shards.pids()[1]
    os.kill(old, signal.SIGKILL)
    pending = shards.call(1, "beat")
    assert shards.ready([pending], 10.0) == [pending]  # resolved by the process's death, not a timeout
    with pytest.raises(ShardLost, match="replay shard 1 died"):
        shards.get(pending)
    service.check()  # the heartbeat fails: restarted from the snapshot's 20 items, 5 counted lost
    stats = service.stats()
    assert stats["replay/shard_restarts"] == 1 and stats["replay/lost_items"] == 5
    assert stats["replay/shard1_size"] == 20
    assert shards.pids()[1] != old and gone(old)
    shards.channels[1].put(chunk(1, 200, 5), timeout=5.0)  # the workers' channel reaches the new process
    assert wait_for_size(service, 45) == 45
    assert service.stats()["replay/shard1_size"] == 25


def test_a_full_channel_makes_the_writer_wait_and_drops_nothing():
    shards = MpShards(ShardOptions(capacity=100), 1, process_context(shards=True), capacity=2)
    channel = shards.channels[0]
    try:
        assert channel.put(chunk(0, 0, 1), 0.1) and channel.put(chunk(0, 1, 1), 0.1)
        assert not channel.put(chunk(0, 2, 1), 0.2)  # no shard reads yet: no room, and nothing sent
        service = ReplayService(shards, batch_size=4, prioritized=False, heartbeat_s=0.0)
        service.start()
        assert channel.put(chunk(0, 2, 1), 5.0)  # the shard drains the channel: room again
        assert wait_for_size(service, 3) == 3
        pid = shards.pids()[0]
        service.stop()
        assert gone(pid)
    finally:
        shards.close()


def test_a_call_to_a_shard_that_is_not_running_is_lost_not_hung():
    shards = MpShards(ShardOptions(capacity=10), 1, process_context(shards=True))
    handle = shards.call(0, "beat")
    assert shards.ready([handle], 0.0) == [handle]
    with pytest.raises(ShardLost, match="not running"):
        shards.get(handle)
    shards.close()


def test_a_hung_shard_process_is_killed_and_replaced():
    shards = MpShards(ShardOptions(capacity=100), 1, process_context(shards=True))
    service = ReplayService(shards, batch_size=4, prioritized=False, heartbeat_s=0.0, timeout_s=2.5)
    try:
        service.start()
        hung = shards.pids()[0]
        os.kill(hung, signal.SIGSTOP)  # alive, never answers
        service.check()  # heartbeat sent
        time.sleep(2.7)
        service.check()  # unanswered past timeout_s: killed, started again
        assert service.stats()["replay/shard_restarts"] == 1
        assert shards.pids()[0] != hung and gone(hung)
        assert shards.channels[0].put(chunk(0, 0, 5), timeout=5.0)
        assert wait_for_size(service, 5) == 5
    finally:
        service.stop()
        shards.close()


def test_shards_need_rollout_workers_on_mp_or_ray(tmp_path):
    from relayrl import launch
    from relayrl.config import build_config
    from relayrl.errors import ConfigError

    config = build_config("dqn", None, ["backend=inline", "workers=2", "dqn.replay_shards=2", "eval.freq=0"],
                          {"total_steps": 1000})
    with pytest.raises(ConfigError, match=r"--backend mp\|ray --workers N.*replay_shards=0"):
        launch.run(config, run_dir=tmp_path / "run", tensorboard=False)


def test_a_shard_process_under_the_rate_limiter_stops_reading_its_channel_until_sampled():
    """The channel is one chunk deep under the limiter; once the shard's share is full it reads no more, so a
    writer waits (nothing dropped), until a sample lets inserts in again."""
    options = ShardOptions(capacity=100, samples_per_insert=1.0, spi_min_size=4, spi_error_buffer=2.0)
    shards = MpShards(options, 1, process_context(shards=True))
    channel = shards.channels[0]
    assert channel.capacity == 1
    service = ReplayService(shards, batch_size=4, prioritized=False, heartbeat_s=0.0, prefetch=1,
                            batches_per_request=1)
    try:
        service.start()
        assert channel.put(chunk(0, 0, 6), 5.0)  # diff 2 - 0: the share is full once stored
        assert wait_for_size(service, 6) == 6
        assert channel.put(chunk(0, 6, 1), 5.0)  # waits in the channel, unread
        assert not channel.put(chunk(0, 7, 1), 0.5)  # no room: the writer waits
        assert service.sample(4) is not None  # 4 rows sampled (and one more request in flight): diff <= -2
        assert channel.put(chunk(0, 7, 1), 5.0)  # the shard reads again
        assert wait_for_size(service, 8) == 8
        service.check()
        assert service.stats()["replay/insert_waits"] >= 1
    finally:
        service.stop()
        shards.close()
