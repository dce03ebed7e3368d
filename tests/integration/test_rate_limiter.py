"""The samples-per-insert rate limiter over a real run: DQN on CartPole with two mp worker processes, the replay
in the learner, at samples per insert 1 +- 0.1. Whichever side is slowed, the measured ratio stays within the
limiter's error buffer, and the waits are counted on the side that was faster."""

from __future__ import annotations

import time

import pytest

from relayrl.config import build_config
from relayrl.io.metrics import read_metrics
from relayrl.runtime import make_pool
from relayrl.training.trainer import run_trainer

SLOW_ENV = "relayrl.testing.envs:relayrl-test/SlowCartPole-v0"
BATCH, START, SPI, TOLERANCE = 32, 1000, 1.0, 0.1  # error buffer 0.1 x 1 x 1000 = 100 rows >= (32 + 1) / 2
# (room for a worker's chunk, 2 envs x 16 steps, besides one update: with slow workers no rows are ever held)


def _limited_run(tmp_path, env, env_kwargs, hooks, total_steps):
    config = build_config("dqn", None, [
        f"env.id={env}", f"env.kwargs={env_kwargs}", "env.num_envs=2", "backend=mp", "workers=2",
        f"dqn.batch_size={BATCH}", f"dqn.start_training={START}", f"dqn.samples_per_insert={SPI}",
        f"dqn.spi_tolerance={TOLERANCE}", "dqn.hidden_sizes=[16]", "eval.freq=0", "eval.episodes=1",
        "eval.num_envs=1"], {"total_steps": total_steps, "seed": 0})
    pool = make_pool(config)
    try:
        summary = run_trainer(config, run_dir=tmp_path / "run", tensorboard=False, samples=pool, hooks=hooks,
                              quiet=True)
    finally:
        pool.close()
    last = [row for row in read_metrics(tmp_path / "run") if "limiter/samples_per_insert" in row][-1]
    return summary, last


def _assert_within_the_bound(summary, last):
    """sampled = updates x batch; inserted - START = sampled / measured; |diff| <= error buffer, so the measured
    ratio is within SPI +- error_buffer / (inserted - START): no further slack (rows past the bound are held)."""
    error_buffer = TOLERANCE * SPI * START
    assert last["limiter/error_buffer"] == pytest.approx(error_buffer)
    assert -error_buffer <= last["limiter/diff"] <= error_buffer
    measured = last["limiter/samples_per_insert"]
    past = summary["updates"] * BATCH / measured  # transitions stored past START when the row was written
    assert past >= START  # long enough for the relative claim below
    assert abs(measured - SPI) <= error_buffer / past + 1e-9
    assert abs(measured - SPI) <= TOLERANCE * SPI


def test_slow_workers_make_the_learner_wait_and_the_ratio_holds(tmp_path):
    """Each env step sleeps 2 ms: the workers are the slow side; the learner's waits are counted, the
    workers' are not."""
    summary, last = _limited_run(tmp_path, SLOW_ENV, "{sleep_us: 1000, busy_us: 0}", [], 2400)
    _assert_within_the_bound(summary, last)
    assert last["limiter/learner_waits"] >= 1 and last["limiter/learner_wait_s"] > 0
    assert last["limiter/insert_waits"] == 0


def test_a_slow_learner_makes_the_workers_wait_and_the_ratio_holds(tmp_path):
    """The learner sleeps 50 ms after every round: the workers are the fast side; their chunks are held
    (the rows past the bound wait, and nothing more is taken meanwhile: the workers block on their full
    channels), and the insert side's waits are counted."""
    def slow_learner(ctx):
        time.sleep(0.05)

    summary, last = _limited_run(tmp_path, "CartPole-v1", "{}", [("after_iter", slow_learner, {})], 2400)
    _assert_within_the_bound(summary, last)
    assert last["limiter/insert_waits"] >= 1
    # (held rows wait through the learner's rounds, 50 ms sleeps included; the learner only ever waits for a
    # full channel's chunks to be read)
    assert last["limiter/insert_wait_s"] > last["limiter/learner_wait_s"]
