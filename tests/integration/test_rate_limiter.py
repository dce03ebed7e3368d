"""The samples-per-insert rate limiter over a real run: DQN on CartPole with two mp worker processes, the replay
in the learner (replay_shards 0) or in two shard processes the workers insert into, at samples per insert
1 +- 0.1. Whichever side is slowed, the measured ratio stays within the limiter's error buffer (plus, with
shards, the slack computed below), and the waits are counted on the side that was faster."""

from __future__ import annotations

import time

import pytest

from relayrl.config import build_config
from relayrl.io.metrics import read_metrics
from relayrl.runtime import make_pool
from relayrl.training.trainer import run_trainer

SLOW_ENV = "relayrl.testing.envs:relayrl-test/SlowCartPole-v0"
BATCH, START, SPI, TOLERANCE, ENVS = 32, 1000, 1.0, 0.1, 2  # error buffer 0.1 x 1 x 1000 = 100 >= (32 + 2 x 1) / 2


def _limited_run(tmp_path, env, env_kwargs, hooks, shards, total_steps=2400):
    config = build_config("dqn", None, [
        f"env.id={env}", f"env.kwargs={env_kwargs}", f"env.num_envs={ENVS}", "backend=mp", "workers=2",
        f"dqn.replay_shards={shards}", f"dqn.batch_size={BATCH}", f"dqn.start_training={START}",
        f"dqn.samples_per_insert={SPI}", f"dqn.spi_tolerance={TOLERANCE}", "dqn.hidden_sizes=[16]", "eval.freq=0",
        "eval.episodes=1", "eval.num_envs=1"], {"total_steps": total_steps, "seed": 0})
    pool = make_pool(config)
    try:
        summary = run_trainer(config, run_dir=tmp_path / "run", tensorboard=False, samples=pool, hooks=hooks,
                              quiet=True)
    finally:
        pool.close()
    last = [row for row in read_metrics(tmp_path / "run") if "limiter/samples_per_insert" in row][-1]
    return config, summary, last


def _slack_above(config, shards):
    """How far past the error buffer the inserts can take S x (inserted - START) - sampled. In the learner:
    nowhere (rows past it are held and split). With N shards: each stores a whole chunk once its share allows
    one row (N x S x (c - 1)), the rows waiting in each shard's channel count as inserted for the learner
    (N x S x c), the shards' shares of START round up (S x (N - 1)), and what the shards have served ahead of
    the learner (its batch in use and one request in flight: 2 x batch). c: a worker's chunk, num_envs x
    (steps_per_iteration + n_step - 1) rows at most."""
    if not shards:
        return 0.0
    chunk = ENVS * (config.dqn.steps_per_iteration + config.dqn.n_step_for(False) - 1)
    return shards * SPI * (chunk - 1) + shards * SPI * chunk + SPI * (shards - 1) + 2 * BATCH


def _assert_within_the_bound(config, summary, last, shards):
    """sampled = updates x batch; inserted - START = sampled / measured; -E <= diff <= E + slack, so the measured
    ratio lies within [SPI - (E + slack) / (inserted - START), SPI + E / (inserted - START)]."""
    error_buffer = TOLERANCE * SPI * START
    slack = _slack_above(config, shards)
    assert last["limiter/error_buffer"] == pytest.approx(error_buffer)
    assert -error_buffer <= last["limiter/diff"] <= error_buffer + slack
    measured = last["limiter/samples_per_insert"]
    past = summary["updates"] * BATCH / measured  # transitions stored past START when the row was written
    assert past >= START  # long enough for the relative claim below
    assert SPI - (error_buffer + slack) / past - 1e-9 <= measured <= SPI + error_buffer / past + 1e-9
    if not shards:
        assert abs(measured - SPI) <= TOLERANCE * SPI


@pytest.mark.parametrize("shards", [0, 2])
def test_slow_workers_make_the_learner_wait_and_the_ratio_holds(tmp_path, shards):
    """Each env step sleeps 1 ms: the workers are the slow side; the learner's waits are counted."""
    config, summary, last = _limited_run(tmp_path, SLOW_ENV, "{sleep_us: 1000, busy_us: 0}", [], shards)
    _assert_within_the_bound(config, summary, last, shards)
    assert last["limiter/learner_waits"] >= 1 and last["limiter/learner_wait_s"] > last["limiter/insert_wait_s"]
    if not shards:  # (in the learner a chunk always fits the room an update leaves: nothing is ever held)
        assert last["limiter/insert_waits"] == 0


@pytest.mark.parametrize("shards", [0, 2])
def test_a_slow_learner_makes_the_workers_wait_and_the_ratio_holds(tmp_path, shards):
    """The learner sleeps 50 ms after every round: the workers are the fast side; their rows wait (held by
    the learner, or left in the shards' channels), the workers block, and the insert side's waits are counted."""
    def slow_learner(ctx):
        time.sleep(0.05)

    config, summary, last = _limited_run(tmp_path, "CartPole-v1", "{}", [("after_iter", slow_learner, {})], shards)
    _assert_within_the_bound(config, summary, last, shards)
    assert last["limiter/insert_waits"] >= 1
    # (the rows wait through the learner's rounds, 50 ms sleeps included; the learner only ever waits for
    # chunks that are ready to be read)
    assert last["limiter/insert_wait_s"] > last["limiter/learner_wait_s"]


@pytest.mark.parametrize("shards", [0, 2])
def test_max_staleness_evicts_by_the_collecting_version_in_the_learner_and_in_shards(tmp_path, shards):
    """DQN on 2 mp workers with max_staleness 8: rows are evicted by the version that collected them, and the
    sampled rows' staleness is reported: below 8 in the learner's replay; with shards, whose requests go out
    ahead of the updates (2 requests of 8 batches in flight besides the 8 batches in use), up to 24 updates
    later than that."""
    config = build_config("dqn", None, [
        "env.num_envs=2", "backend=mp", "workers=2", f"dqn.replay_shards={shards}", "dqn.batch_size=32",
        "dqn.start_training=200", "dqn.max_staleness=8", "dqn.updates_per_step=1", "dqn.hidden_sizes=[16]",
        "eval.freq=0", "eval.episodes=1", "eval.num_envs=1"], {"total_steps": 1500, "seed": 0})
    pool = make_pool(config)
    try:
        summary = run_trainer(config, run_dir=tmp_path / "run", tensorboard=False, samples=pool, quiet=True)
    finally:
        pool.close()
    rows = [row for row in read_metrics(tmp_path / "run") if "train/replay/sampled_staleness_max" in row]
    assert summary["updates"] > 0 and rows
    late = 0 if not shards else (2 + 1) * 8
    assert max(row["train/replay/sampled_staleness_max"] for row in rows) <= 8 - 1 + late
    assert all(row["train/replay/sampled_staleness_mean"] >= 0 for row in rows)
    assert rows[-1]["train/replay/evicted"] > 0
