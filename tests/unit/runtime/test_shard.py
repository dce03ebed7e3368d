"""A replay shard's answers to its messages, and what it does with bad ones."""

import numpy as np
import pytest

from relayrl.runtime.messages import InsertTransitions, SampleBatch, UpdatePriority
from relayrl.runtime.shard import ReplayShard, ShardOptions


def chunk(n, seq=0, obs_dim=3, obs_dtype=np.float32, start=0):
    batch = {"obs": (np.arange(start, start + n)[:, None] * np.ones(obs_dim)).astype(obs_dtype),
             "action": np.zeros(n, np.int64), "reward": np.ones(n, np.float32)}
    return InsertTransitions(worker_id=2, seq=seq, version=0, batch=batch, env_steps=n)


def test_stores_samples_and_counts():
    shard = ReplayShard(1, ShardOptions(capacity=100, min_size=5))
    assert shard.insert(chunk(4)) == 4
    early = shard.sample(SampleBatch(7, 8))
    assert early.batch == {} and early.request_id == 7 and "holds 4 of the 5" in early.reason
    shard.insert(chunk(4, seq=1, start=4))
    data = shard.sample(SampleBatch(8, 16))
    assert data.shard_id == 1 and data.size == 8 and data.total == 8.0 and data.min_mass == 1.0
    assert set(data.batch) == {"obs", "action", "reward", "index", "mass"}
    assert len(data.batch["obs"]) == 16 and set(data.batch["obs"][:, 0]) <= set(range(8))
    beat = shard.heartbeat().counters
    assert (beat["inserted"], beat["chunks"], beat["early_requests"], beat["sampled"]) == (8, 2, 1, 16)


@pytest.mark.parametrize("bad, problem", [
    (chunk(4, obs_dim=5), "obs: float32[5] instead of float32[3]"),
    (chunk(4, obs_dtype=np.int64), "obs: int64[3] instead of float32[3]"),
])
def test_a_chunk_of_the_wrong_schema_is_refused_and_counted(bad, problem):
    shard = ReplayShard(0, ShardOptions(capacity=100))
    shard.insert(chunk(4))
    assert shard.insert(bad) == 0
    (reason,) = shard.take_refusals()
    assert problem in reason and "worker 2" in reason and "same env id" in reason
    assert shard.heartbeat().counters["refused_chunks"] == 1 and len(shard.buffer) == 4


def test_the_columns_known_in_advance_guard_even_the_first_chunk():
    options = ShardOptions(capacity=10, columns=(("obs", "float32", (5,)), ("action", "int64", ())))
    shard = ReplayShard(0, options)
    assert shard.insert(chunk(2)) == 0 and "obs: float32[3] instead of float32[5]" in shard.take_refusals()[0]
    missing = InsertTransitions(0, 0, 0, {"obs": np.zeros((2, 5), np.float32)}, 2)
    assert shard.insert(missing) == 0 and "missing ['action']" in shard.take_refusals()[0]
    assert shard.insert(chunk(2, obs_dim=5)) == 2  # the first that fits fixes the other columns (reward)
    assert shard.insert(InsertTransitions(0, 1, 0, {"obs": np.zeros((2, 5), np.float32),
                                                    "action": np.zeros(2, np.int64)}, 2)) == 0
    assert "missing ['reward']" in shard.take_refusals()[0]


def test_priority_updates_for_overwritten_items_are_skipped_and_counted():
    shard = ReplayShard(0, ShardOptions(capacity=4, sampler="prioritized"))
    shard.insert(chunk(4))
    old = shard.sample(SampleBatch(0, 4)).batch["index"]
    shard.insert(chunk(2, seq=1, start=4))  # overwrites two of the four rows
    applied = shard.update_priority(UpdatePriority(0, old, np.full(4, 5.0)))
    overwritten = int(np.sum(old % 4 < 2))
    assert applied == 4 - overwritten
    counters = shard.heartbeat().counters
    assert counters["priority_updates"] == applied and counters["priority_skipped"] == overwritten


def test_snapshot_restores_into_a_new_shard(tmp_path):
    path = tmp_path / "shard0.safetensors"
    shard = ReplayShard(0, ShardOptions(capacity=50, sampler="prioritized"), snapshot_path=str(path))
    shard.insert(chunk(20))
    data = shard.sample(SampleBatch(0, 8))
    shard.update_priority(UpdatePriority(0, data.batch["index"], np.full(8, 3.0)))
    assert shard.snapshot() == 20
    again = ReplayShard(0, ShardOptions(capacity=50, sampler="prioritized"), snapshot_path=str(path))
    assert len(again.buffer) == 20 and again.heartbeat().counters["restored"] == 20
    assert again.total() == pytest.approx(shard.total())
    assert again.insert(chunk(2, obs_dim=4)) == 0  # the restored schema still guards it


def test_under_the_rate_limiter_a_shard_accepts_inserts_only_while_its_share_allows_and_counts_the_wait():
    """Share: samples per insert 1 with 10 rows before sampling and an error buffer of 4 rows: chunks are
    accepted (whole) while diff + 1 <= 4, then not until samples bring the diff down."""
    shard = ReplayShard(0, ShardOptions(capacity=100, samples_per_insert=1.0, spi_min_size=10, spi_error_buffer=4.0))
    assert shard.accepts() and shard.insert(chunk(12)) == 12  # diff = 12 - 10 = 2: one more row fits
    assert shard.accepts() and shard.insert(chunk(3, seq=1, start=12)) == 3  # diff 5: past the share by one chunk
    assert not shard.accepts() and not shard.accepts()  # (one wait, however often asked)
    shard.sample(SampleBatch(1, 2))  # diff 3
    assert shard.accepts()
    beat = shard.heartbeat().counters
    assert beat["insert_waits"] == 1 and beat["insert_wait_s"] >= 0
    assert ReplayShard(1, ShardOptions(capacity=10)).accepts()  # no limiter: always


def test_with_max_staleness_a_shard_evicts_by_the_version_that_collected_the_rows():
    """Rows carry their chunk's (collecting) version; a request at learner version v evicts those with
    v - version >= max_staleness and samples only the fresher."""
    shard = ReplayShard(0, ShardOptions(capacity=100, max_staleness=3))
    old = InsertTransitions(2, 0, 1, chunk(5).batch, 5)  # collected at version 1
    new = InsertTransitions(2, 1, 4, chunk(5, start=5).batch, 5)  # at version 4
    assert shard.insert(old) == 5 and shard.insert(new) == 5
    data = shard.sample(SampleBatch(1, 20, version=3))  # nothing stale yet: both
    assert set(data.batch["version"].tolist()) == {1, 4}
    data = shard.sample(SampleBatch(2, 20, version=4))  # 4 - 1 >= 3: version 1 evicted
    assert set(data.batch["version"].tolist()) == {4} and set(data.batch["obs"][:, 0]) <= set(range(5, 10))
    empty = shard.sample(SampleBatch(3, 4, version=7))
    assert empty.batch == {} and "nothing left" in empty.reason
