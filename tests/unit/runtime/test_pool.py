import numpy as np

from relayrl.runtime.backends import Backend, ManagedBackend
from relayrl.runtime.messages import InsertTransitions
from relayrl.runtime.pool import AsyncOnPolicyPool, OffPolicyPool, OnPolicyPool


class ScriptedBackend(ManagedBackend):
    """Delivers prepared chunks in a fixed order, like workers finishing at different times."""

    def __init__(self, script, num_workers=2):
        self.script, self.num_workers, self.restarts = list(script), num_workers, 0
        self.requests, self.published = [], []

    def start(self, seed):
        pass

    def publish(self, params, env_steps):
        self.published.append((params.version, env_steps))

    def request(self, version):
        self.requests.append(version)

    def receive(self, timeout=0.0):
        return [self.script.pop(0)] if self.script else []

    def queue_depth(self):
        return len(self.script)

    def close(self):
        pass


def chunk(worker, version, value, steps=3):
    batch = {"reward": np.full((steps, 1), value, np.float32)}
    return InsertTransitions(worker, 0, version, batch, steps, (float(value),), (steps,))


def test_on_policy_pool_rejects_other_versions_and_joins_chunks_in_worker_order():
    backend = ScriptedBackend([chunk(1, 5, 1.0), chunk(0, 4, 9.0), chunk(0, 5, 0.0)])
    pool = OnPolicyPool(backend)
    pool.publish({"w": np.zeros(1)}, 5)
    rollout, steps = pool.pull()
    assert backend.requests == [5] and steps == 6
    assert pool.counts["other_version"] == 1  # the version-4 chunk
    np.testing.assert_array_equal(rollout["reward"][0], [0.0, 1.0])  # worker 0's column first
    returns, _ = pool.pop_episodes()
    assert sorted(returns) == [0.0, 1.0]
    stats = pool.stats()
    assert stats["workers/other_version"] == 1.0 and stats["workers/lag_max"] == 0.0


def test_off_policy_pool_counts_env_steps_and_policy_lag():
    backend = ScriptedBackend([chunk(0, 0, 1.0), chunk(1, 2, 2.0)])
    pool = OffPolicyPool(backend)
    pool.publish({"w": np.zeros(1)}, 3)
    batch, steps = pool.pull()
    assert steps == 3 and len(batch["reward"]) == 3
    batch, steps = pool.poll()
    assert steps == 3 and pool.env_steps == 6
    assert backend.published == [(3, 0)]
    stats = pool.stats()
    assert stats["workers/lag_max"] == 3.0 and stats["workers/lag_mean"] == 2.0
    assert pool.poll() == ({}, 0)  # nothing arrived: returns at once


def test_off_policy_rows_carry_the_version_of_the_policy_that_collected_them():
    """The replay's staleness counts from the collecting version (max_staleness), so each row says it."""
    pool = OffPolicyPool(ScriptedBackend([chunk(0, 0, 1.0), chunk(1, 2, 2.0, steps=2)]))
    pool.publish({"w": np.zeros(1)}, 3)
    batch, _ = pool.pull()
    more, _ = pool.poll()
    assert batch["version"].tolist() == [0, 0, 0] and more["version"].tolist() == [2, 2]


def test_chunks_beyond_max_lag_are_dropped_but_their_steps_count():
    backend = ScriptedBackend([chunk(0, 1, 1.0), chunk(1, 4, 2.0), chunk(0, 5, 3.0)])
    pool = AsyncOnPolicyPool(backend, max_lag=1)
    pool.publish({"w": np.zeros(1)}, 5)
    rollout, steps = pool.pull()  # the version-1 chunk is 4 behind: dropped, and pull waits for more
    assert steps == 6 and pool.counts["too_old"] == 1
    np.testing.assert_array_equal(rollout["reward"][0], [2.0])
    np.testing.assert_array_equal(rollout["column"][0], [1])  # worker 1's env column
    off = OffPolicyPool(ScriptedBackend([chunk(0, 0, 1.0)]), max_lag=2)
    off.publish({"w": np.zeros(1)}, 3)
    assert off.pull() == ({}, 3) and off.counts["too_old"] == 1
    assert off.stats()["runtime/queue_depth"] == 0.0


class BurstBackend(ScriptedBackend):
    """Delivers each prepared burst in one receive, like a worker that finished two chunks while
    the learner was busy."""

    def receive(self, timeout=0.0):
        return list(self.script.pop(0)) if self.script else []


def segment(worker, seq, version, steps=3, reward=1.0):
    batch = {"reward": np.full((steps, 1), reward, np.float32), "seq": np.full((steps, 1), seq),
             "terminated": np.zeros((steps, 1), bool), "truncated": np.zeros((steps, 1), bool)}
    return InsertTransitions(worker, seq, version, batch, steps)


def test_async_pool_joins_one_workers_chunks_in_the_order_they_came():
    backend = BurstBackend([[segment(0, 0, 1), segment(0, 1, 1), segment(1, 0, 1), segment(0, 2, 1)]])
    pool = AsyncOnPolicyPool(backend)
    pool.publish({"w": np.zeros(1)}, 2)
    rollout, steps = pool.pull()
    assert rollout["column"][0].tolist() == [0, 0, 1, 0] and rollout["seq"][0].tolist() == [0, 1, 0, 2]
    assert steps == 12 and pool.worker_steps.tolist() == [9, 3]


def test_appo_reward_scaling_follows_an_env_through_two_chunks_delivered_together():
    """PPO's running return (reward normalisation) must continue from chunk 0 into chunk 1 of the
    same env, as if the learner had seen them one at a time."""
    import gymnasium as gym

    from relayrl.algos import get_algo

    def algo():
        cfg = get_algo("appo").config_cls(gamma=0.5)
        return get_algo("appo").algo_cls(cfg, gym.spaces.Box(-1, 1, (2,)), gym.spaces.Discrete(2), 2)

    one_at_a_time, scaled = algo(), []
    for seq in (0, 1):
        pool = AsyncOnPolicyPool(BurstBackend([[segment(0, seq, 0, reward=seq + 1.0)]]))
        pool.publish({"w": np.zeros(1)}, 0)
        scaled.append(one_at_a_time.scale_rewards(pool.pull()[0]))
    together = algo()
    pool = AsyncOnPolicyPool(BurstBackend([[segment(0, 0, 0, reward=1.0), segment(0, 1, 0, reward=2.0)]]))
    pool.publish({"w": np.zeros(1)}, 0)
    rollout, _ = pool.pull()
    assert rollout["column"][0].tolist() == [0, 0]  # one env's two chunks side by side
    np.testing.assert_array_equal(together.scale_rewards(rollout), np.concatenate(scaled, axis=1))
    expected = sum(0.5 ** t for t in range(6)) + sum(0.5 ** t for t in range(3))  # 3 steps of 1, 3 of 2
    assert one_at_a_time._ret[0] == together._ret[0] == expected
    assert together._ret[1] == 0.0  # worker 1's column untouched


def test_replay_shards_are_asked_of_a_backend_by_its_capability_not_its_name():
    """OffPolicyPool.replay_service asks the backend for shards exactly when its type says it serves them."""
    from relayrl.data.replay import ReplaySpec

    class ShardBackend(ScriptedBackend):
        serves_replay = True

        def replay_service(self, options, num_shards, **service_options):
            self.asked = (options.capacity, num_shards, service_options["batch_size"])
            return "the service"

    spec = ReplaySpec(capacity=100, shards=2, batch_size=8, prioritized=False, seed=0)
    serving = ShardBackend([])
    assert OffPolicyPool(serving).replay_service(spec) == "the service" and serving.asked == (50, 2, 8)
    assert OffPolicyPool(ScriptedBackend([])).replay_service(spec) is None  # inline-like: the learner's replay


def test_the_rate_limiter_over_shards_needs_shards_that_hold_inserts_back_and_a_worker_for_each():
    """samples_per_insert with replay shards: refused on a backend whose shards cannot hold the workers' inserts
    back (Ray's), and with more shards than workers; on mp the shards get their share of the bound and the
    learner samples one batch ahead."""
    import pytest

    from relayrl.data.replay import ReplaySpec
    from relayrl.errors import ConfigError

    class ShardBackend(ScriptedBackend):
        serves_replay = True  # (limits_inserts: False, as Ray's)

        def replay_service(self, options, num_shards, **service_options):
            self.asked = (options, service_options)
            return "the service"

    spec = ReplaySpec(capacity=100, shards=2, batch_size=8, samples_per_insert=2.0, spi_min_size=101,
                      spi_error_buffer=40.0)
    with pytest.raises(ConfigError, match="--backend mp") as info:
        OffPolicyPool(ShardBackend([])).replay_service(spec)
    assert info.value.exit_code == 2

    class LimitingBackend(ShardBackend):
        limits_inserts = True

    with pytest.raises(ConfigError, match="replay_shards to at most 1"):
        OffPolicyPool(LimitingBackend([], num_workers=1)).replay_service(spec)
    limiting = LimitingBackend([], num_workers=2)
    assert OffPolicyPool(limiting).replay_service(spec) == "the service"
    options, service_options = limiting.asked
    assert (options.samples_per_insert, options.spi_min_size, options.spi_error_buffer) == (2.0, 51, 20.0)
    assert service_options["prefetch"] == 1 and service_options["batches_per_request"] == 1


def test_every_backend_is_a_backend_with_its_capabilities():
    from relayrl.config import build_config
    from relayrl.runtime import make_backend
    from relayrl.runtime.backends.inline import InlineBackend
    from relayrl.runtime.backends.mp import MpBackend
    from relayrl.runtime.backends.ray import RayBackend

    backend = make_backend(build_config("dqn", None, ["workers=2", "backend=inline"]))
    assert isinstance(backend, InlineBackend) and isinstance(backend, Backend) and not backend.serves_replay
    assert issubclass(MpBackend, Backend) and MpBackend.serves_replay and MpBackend.limits_inserts
    assert issubclass(RayBackend, Backend) and RayBackend.serves_replay and not RayBackend.limits_inserts
    backend.close()
