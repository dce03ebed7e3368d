"""Sampling across replay shards against one unsharded buffer holding the same items."""

import numpy as np
import pytest

from relayrl.data.replay import ReplayBuffer
from relayrl.runtime.messages import InsertTransitions, SampleBatch
from relayrl.runtime.shard import ReplayShard, ShardOptions
from relayrl.runtime.sharding import ShardedSampling

ALPHA = 0.6


def chunk(ids, seq=0):
    ids = np.asarray(ids)
    batch = {"obs": ids.astype(np.float32)[:, None], "reward": np.zeros(len(ids), np.float32)}
    return InsertTransitions(worker_id=0, seq=seq, version=0, batch=batch, env_steps=len(ids))


def priorities_of(ids):
    return 0.1 + (np.asarray(ids) % 7) * 0.5  # seven distinct priorities


def sharded_setup(prioritized, sizes=(30, 10)):
    sampler = "prioritized" if prioritized else "uniform"
    shards, start = [], 0
    for k, size in enumerate(sizes):
        shard = ReplayShard(k, ShardOptions(capacity=64, sampler=sampler, alpha=ALPHA, seed=k))
        ids = np.arange(start, start + size)
        shard.insert(chunk(ids))
        if prioritized:  # the items' ids are their obs: sample every item once to learn its shard id
            every = shard.buffer.storage.get(np.arange(size))
            local = shard.buffer.storage.generation[:size] * 64 + np.arange(size)
            shard.buffer.update_priorities(local, priorities_of(every["obs"][:, 0]))
        shards.append(shard)
        start += size
    sampling = ShardedSampling(len(shards), prioritized, beta=0.4, beta_steps=10**12, seed=3)
    for shard in shards:
        sampling.observe(shard.heartbeat())
    return shards, sampling, start


def draw(shards, sampling, n, request_id=0):
    counts = sampling.split(n)
    answers = [s.sample(SampleBatch(request_id, int(c))) for s, c in zip(shards, counts) if c > 0]
    return sampling.merge(answers)


@pytest.mark.parametrize("prioritized", [False, True])
def test_item_frequencies_match_one_buffer(prioritized):
    shards, sampling, n_items = sharded_setup(prioritized)
    seen = np.zeros(n_items)
    for r in range(600):
        batch = draw(shards, sampling, 64, r)
        np.add.at(seen, batch["obs"][:, 0].astype(int), 1)
    mass = priorities_of(np.arange(n_items)) ** ALPHA if prioritized else np.ones(n_items)
    expected = mass / mass.sum() * seen.sum()
    chi2 = ((seen - expected) ** 2 / expected).sum()
    assert chi2 < 80, chi2  # 39 degrees of freedom: p < 1e-4 above ~80
    # and a buffer of 30 uniform items is not what this looks like: the test can tell distributions apart
    if prioritized:
        flat = np.full(n_items, seen.sum() / n_items)
        assert ((seen - flat) ** 2 / flat).sum() > 200


def test_weights_equal_one_buffers():
    shards, sampling, n_items = sharded_setup(True)
    one = ReplayBuffer(64, sampler="prioritized", alpha=ALPHA, beta=0.4, beta_steps=10**12, seed=0)
    ids = np.arange(n_items)
    one.add({"obs": ids.astype(np.float32)[:, None], "reward": np.zeros(n_items, np.float32)})
    one.update_priorities(one.storage.generation[:n_items] * 64 + ids, priorities_of(ids))
    reference = {}
    for _ in range(50):
        s = one.sample(64)
        reference.update(zip(s["obs"][:, 0].astype(int), s["weight"]))
    batch = draw(shards, sampling, 256)
    for item, weight in zip(batch["obs"][:, 0].astype(int), batch["weight"]):
        assert weight == pytest.approx(reference[item], rel=1e-5)
    assert batch["weight"].max() <= 1.0 and batch["weight"].min() < 1.0


def test_priority_updates_reach_the_item_in_its_shard():
    shards, sampling, _ = sharded_setup(True)
    batch = draw(shards, sampling, 32)
    messages = sampling.route(batch["index"], np.full(32, 100.0))
    assert sorted(m.shard_id for m in messages) == sorted({int(i) % 2 for i in batch["index"]})
    for m in messages:
        assert shards[m.shard_id].update_priority(m) == len(m.index)
    for shard in shards:
        sampling.observe(shard.heartbeat())
    again = draw(shards, sampling, 256)
    hot = set(batch["obs"][:, 0].astype(int))
    assert np.mean([int(o) in hot for o in again["obs"][:, 0]]) > 0.8  # they now hold most of the mass


def test_a_split_before_any_shard_reports_is_none_and_empty_answers_merge_to_none():
    sampling = ShardedSampling(2, prioritized=False)
    assert sampling.split(8) is None
    shard = ReplayShard(0, ShardOptions(capacity=8, min_size=4))
    answer = shard.sample(SampleBatch(0, 8))
    assert answer.batch == {} and "holds 0 of the 4 items" in answer.reason
    assert sampling.merge([answer]) is None


def test_bad_priority_updates_are_refused():
    sampling = ShardedSampling(2, prioritized=True)
    with pytest.raises(ValueError, match="2 items but 1"):
        sampling.route(np.array([0, 1]), np.array([1.0]))
    with pytest.raises(ValueError, match="never negative"):
        sampling.route(np.array([-1]), np.array([1.0]))
