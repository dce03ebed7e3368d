"""The learner's handle on replay shards (ReplayService), with the shards in this process."""

import numpy as np
import pytest

from relayrl.errors import RelayRLError
from relayrl.runtime.messages import InsertTransitions
from relayrl.runtime.service import ReplayService
from relayrl.runtime.shard import ShardOptions
from relayrl.testing.shards import LocalShards


def batch(start, n):
    ids = np.arange(start, start + n)
    return {"obs": ids.astype(np.float32)[:, None], "reward": np.zeros(n, np.float32)}


def service(prioritized=False, **kw):
    options = ShardOptions(capacity=100, sampler="prioritized" if prioritized else "uniform")
    out = ReplayService(LocalShards(options, 2), batch_size=16, prioritized=prioritized, heartbeat_s=0.0, **kw)
    out.start()
    return out


def test_samples_come_from_every_shard_with_requests_prefetched():
    s = service()
    assert s.sample(16) is None and len(s) == 0  # nothing inserted yet: no batch, no error
    s.add(batch(0, 20))
    s.add(batch(20, 20))  # round-robin: one chunk per shard
    s.check()  # the heartbeats tell the learner what each shard holds
    assert len(s) == 40
    got = np.concatenate([s.sample(16)["obs"][:, 0] for _ in range(20)])
    assert len(s._requests) == 2 and len(s._ready) == 4  # 20 of 8 batches taken: 4 left, two requests in flight
    assert (got < 20).any() and (got >= 20).any() and got.max() < 40
    stats = s.stats()
    assert stats["replay/inserted"] == 40 and stats["replay/sampled"] == 320
    with pytest.raises(ValueError, match="batches of 16, not 8"):
        s.sample(8)


def test_priority_updates_go_back_to_each_items_shard():
    s = service(prioritized=True)
    s.add(batch(0, 30))
    s.add(batch(30, 30))
    s.check()
    sample = s.sample(16)
    assert s.update_priorities(sample["index"], np.full(16, 50.0)) == 16
    s.check()
    updated = s.stats()
    assert updated["replay/priority_skipped"] == 0
    hot = set(sample["obs"][:, 0])
    # they reach the shards with the next request: after the batches already drawn (7 left of this
    # request, 2 requests of 8 in flight), 16 of 60 items hold most of the mass
    later = np.concatenate([s.sample(16)["obs"][:, 0] for _ in range(7 + 2 * 8 + 10)])
    assert np.mean([o in hot for o in later[:7 * 16]]) < 0.5 and np.mean([o in hot for o in later[-160:]]) > 0.7


def test_a_dead_shard_is_restarted_from_its_snapshot_and_the_rest_counted_lost(tmp_path):
    s = service()
    s.add(batch(0, 10))
    s.add(batch(10, 10))
    s.check()
    s.save(tmp_path / "replay.safetensors")  # each shard writes its snapshot beside it
    assert {"replay_shard0.safetensors", "replay_shard1.safetensors"} <= {p.name for p in tmp_path.iterdir()}
    s.add(batch(20, 6))  # shard 0 takes 6 more after its snapshot
    s.check()
    s.shards.kill(0)
    s.check()  # its heartbeat fails: restarted, the snapshot's 10 items restored, 6 lost
    stats = s.stats()
    assert stats["replay/shard_restarts"] == 1 and stats["replay/lost_items"] == 6
    assert stats["replay/shard0_size"] == 10 and len(s) == 20
    assert s.sample(16) is not None


def test_restarts_are_bounded():
    s = service(max_restarts=1)
    s.add(batch(0, 4))
    s.shards.kill(1)
    s.check()
    s.shards.kill(1)
    with pytest.raises(RelayRLError, match="replay shard 1 failed .* after 1 restarts of replay shards"):
        s.check()


def test_a_resume_starts_the_shards_from_their_snapshots(tmp_path):
    s = service()
    s.add(batch(0, 8))
    s.add(batch(8, 8))
    s.save(tmp_path / "replay.safetensors")
    options = ShardOptions(capacity=100)
    again = ReplayService(LocalShards(options, 2), batch_size=16, prioritized=False)
    again.load(tmp_path / "replay.safetensors")
    again.start()
    assert len(again) == 16 and again.stats()["replay/lost_items"] == 0


def test_a_corrupt_snapshot_starts_the_shard_empty_and_says_so(tmp_path, caplog):
    (tmp_path / "replay_shard0.safetensors").write_bytes(b"not a snapshot")
    s = ReplayService(LocalShards(ShardOptions(capacity=10), 2), batch_size=4, prioritized=False)
    s.load(tmp_path / "replay.safetensors")
    s.start()
    assert len(s) == 0 and any("started empty" in r for r in s.refusals)


def test_a_shard_found_dead_when_saving_is_restarted_and_saved(tmp_path):
    s = service()
    s.add(batch(0, 10))
    s.add(batch(10, 10))
    s.check()
    s.save(tmp_path / "replay.safetensors")
    s.shards.kill(1)
    s.save(tmp_path / "replay.safetensors")  # shard 1 comes back from the first snapshot, then writes again
    assert s.stats()["replay/shard_restarts"] == 1 and s.stats()["replay/lost_items"] == 0 and len(s) == 20


def test_inserts_made_by_others_count_before_the_shards_report_them():
    s = service()
    s.note_inserted(30)  # a node proxy's inserts, still on their way
    assert len(s) == 30
    s.add(batch(0, 30))  # (here they land through add, which is where a proxy's would)
    s.check()
    assert len(s) == 30  # reported now, not counted twice
    s.note_inserted(1000)
    assert len(s) == 200  # never more than the shards can hold


class HangingShards(LocalShards):
    """Shard ``hung`` answers nothing (a hung or partitioned shard): its handles never become ready."""

    hung: int | None = None
    of: dict = {}

    def call(self, k, method, *args):
        handle = super().call(k, method, *args)
        self.of[id(handle)] = (k, handle)
        return handle

    def ready(self, handles, timeout):
        return [h for h in handles if self.of[id(h)][0] != self.hung]

    def start(self, k, snapshot_path):
        if k == self.hung:  # the hung process is gone; its successor answers
            self.hung = None
        super().start(k, snapshot_path)


def test_a_hung_shard_is_replaced_after_the_timeout():
    shards = HangingShards(ShardOptions(capacity=100), 2)
    s = ReplayService(shards, batch_size=16, prioritized=False, heartbeat_s=0.0, timeout_s=0.0)
    s.start()
    s.add(batch(0, 20))
    s.add(batch(20, 20))
    s.check()
    shards.hung = 0
    s.check()  # its heartbeat goes unanswered past the timeout: killed and started again (empty: no snapshot)
    s.check()
    stats = s.stats()
    assert stats["replay/shard_restarts"] == 1 and stats["replay/lost_items"] == 20
    assert stats["replay/shard0_size"] == 0 and len(s) == 20


def test_the_first_sample_asks_the_shards_what_they_hold_when_only_inserts_were_noted():
    s = ReplayService(LocalShards(ShardOptions(capacity=100), 2), batch_size=16, prioritized=False,
                      heartbeat_s=3600.0)  # no heartbeat falls due during the test
    s.start()
    s.shards.call(0, "insert", InsertTransitions(0, 0, 0, batch(0, 20), 20))  # a node proxy's insert
    s.note_inserted(20)
    assert len(s) == 20 and s.sampling.size() == 0  # counted, not yet reported by the shard
    sample = s.sample(16)  # asks the shards instead of answering None
    assert sample is not None and set(sample["obs"][:, 0]) <= set(range(20))


def test_max_staleness_reaches_the_shards_with_the_learners_version():
    """The service says it evicts (the replay loop then passes its version) and sends that version with its
    requests: rows collected at version 0 are gone once the learner is 2 versions on."""
    options = ShardOptions(capacity=100, max_staleness=2)
    out = ReplayService(LocalShards(options, 2), batch_size=4, prioritized=False, heartbeat_s=0.0, prefetch=1,
                        batches_per_request=1, max_staleness=2)
    out.start()
    out.add({**batch(0, 20), "version": np.zeros(20, np.int64)})
    out.add({**batch(20, 20), "version": np.zeros(20, np.int64)})
    assert out.max_staleness == 2
    assert out.sample(4, version=1) is not None
    for _ in range(3):  # (the request in flight was sent at version 1)
        sampled = out.sample(4, version=2)
    assert sampled is None and out.stats()["replay/evicted"] == 40
