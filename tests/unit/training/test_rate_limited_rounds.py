"""The rate limiter in the replay loop (training/offpolicy.py with data/replay/ratelimit.py): the faster side
waits and is counted; the config refuses limiter settings that contradict the schedule or cannot be met.
And staleness from the collecting version: max_staleness evicts by the version a source's rows carry."""

from __future__ import annotations

import numpy as np
import pytest

from relayrl.core import Algorithm, SampleSource
from relayrl.errors import ConfigError
from relayrl.options import ReplayLoopConfig
from relayrl.training.learner import Learner
from relayrl.training.offpolicy import ReplayRounds


class VersionedAlgo(Algorithm):
    """Each learn is one update: the policy's version counts them; records the rows' versions."""

    class _Policy:
        version = 0

    def __init__(self):
        self.policy = self._Policy()
        self.seen = []

    def learn(self, batch, progress=0.0):
        self.seen.append(batch.get("version"))
        self.policy.version += 1
        return {"loss": 0.0}

    def set_progress(self, env_steps, total_steps):
        pass

    def state_dict(self):
        return {}

    def load_state_dict(self, state):
        pass


class CountingSource(SampleSource):
    """Delivers ``n`` transitions per pull (with ``lag``: rows tagged as collected ``lag`` versions behind
    ``algo``'s policy, as rollout workers' chunks are); counts its pulls."""

    def __init__(self, n, algo=None, lag=None):
        self.n, self.algo, self.lag, self.pulls = n, algo, lag, 0

    def reset(self, seed):
        pass

    def pull(self):
        self.pulls += 1
        batch = {"obs": np.zeros((self.n, 2), np.float32), "reward": np.ones(self.n, np.float32)}
        if self.lag is not None:
            batch["version"] = np.full(self.n, self.algo.policy.version - self.lag, np.int64)
        return batch, self.n

    def pop_episodes(self):
        return [], []


def _run(rounds, learner, iterations):
    for _ in range(iterations):
        due, steps = rounds.gather(learner.ctx.env_steps, learner.ctx.updates)
        learner.ctx.env_steps += steps
        learner.learn(due)


def _limited(n, **options):
    cfg = ReplayLoopConfig(buffer_size=10_000, batch_size=8, start_training=40, samples_per_insert=1.0,
                           spi_tolerance=0.25, **options)  # error buffer 0.25 x 1 x 40 = 10 rows >= 8 / 2
    algo = VersionedAlgo()
    source = CountingSource(n)
    rounds = ReplayRounds(algo, source, cfg, seed=0, total_steps=100_000)
    return rounds, source, Learner(rounds.learning)


def test_collectors_faster_than_the_limit_wait_and_their_wait_is_counted():
    """64 rows per pull, more than the bound lets in at once (error buffer 10 rows): the rows past it are held,
    the source is not pulled while any are (the local collector collects less, workers block), nothing is
    dropped, and the measured samples per insert stays within the error buffer at every round."""
    rounds, source, learner = _limited(64)
    limiter = rounds.limiter
    for _ in range(60):
        due, steps = rounds.gather(learner.ctx.env_steps, learner.ctx.updates)
        learner.ctx.env_steps += steps
        learner.learn(due)
        rounds._count_samples()
        if limiter.inserted >= limiter.min_size:
            assert -limiter.error_buffer <= limiter.diff() <= limiter.error_buffer
    stats = rounds.stats()
    assert source.pulls < 60 and stats["limiter/insert_waits"] >= 1  # rounds that took nothing new
    held = 0 if rounds._held is None else len(rounds._held["obs"])
    assert limiter.inserted + held == 64 * source.pulls and limiter.inserted == len(rounds.buffer)  # none dropped
    assert limiter.sampled == 8 * learner.ctx.updates > 0
    past = limiter.inserted - limiter.min_size
    assert abs(stats["limiter/samples_per_insert"] - 1.0) <= limiter.error_buffer / past
    assert stats["limiter/learner_waits"] == 0


def test_a_learner_faster_than_the_collectors_runs_only_the_updates_the_limit_allows_and_waits():
    """3 rows per pull at batch_size 8: at most one update per ~3 pulls; the learner's waits are counted."""
    rounds, source, learner = _limited(3)
    _run(rounds, learner, 200)
    limiter, stats = rounds.limiter, rounds.stats()
    assert source.pulls == 200 and stats["limiter/insert_waits"] == 0
    assert stats["limiter/learner_waits"] >= 10 and stats["limiter/learner_wait_s"] >= 0
    assert limiter.sampled == 8 * learner.ctx.updates
    assert limiter.sampled <= 1.0 * (limiter.inserted - limiter.min_size) + limiter.error_buffer
    assert learner.ctx.updates >= (limiter.inserted - limiter.min_size - limiter.error_buffer) // 8


def test_the_limiter_counts_survive_a_resume():
    rounds, _, learner = _limited(16)
    _run(rounds, learner, 30)
    state = rounds.state()
    again, _, _ = _limited(16)
    again.limiter.restore(state["limiter"])
    assert (again.limiter.inserted, again.limiter.sampled) == (rounds.limiter.inserted, rounds.limiter.sampled)


@pytest.mark.parametrize("option", [{"updates_per_step": 2.0}, {"max_training_steps_per_env_step": 1.0}])
def test_samples_per_insert_with_a_schedule_option_is_refused_naming_both(option):
    cfg = ReplayLoopConfig(batch_size=32, start_training=1000, samples_per_insert=1.0, **option)
    with pytest.raises(ConfigError) as info:
        cfg.check("sac")
    key = next(iter(option))
    assert "sac.samples_per_insert" in str(info.value) and f"sac.{key}" in str(info.value)
    assert f"drop sac.{key}" in str(info.value) and info.value.exit_code == 2


def test_with_replay_shards_the_bound_leaves_room_for_a_row_at_every_shard():
    """Each shard holds inserts back on its share: 2 E >= batch_size + shards x samples_per_insert."""
    ok = dict(batch_size=32, start_training=1000, samples_per_insert=4.0, spi_tolerance=0.01)  # 2 E = 80
    ReplayLoopConfig(**ok, replay_shards=12).check("sac")  # 32 + 12 x 4 = 80
    with pytest.raises(ConfigError, match=r"at each of 13 shards.*sac.spi_tolerance to at least 0.0105"):
        ReplayLoopConfig(**ok, replay_shards=13).check("sac")


def test_bounds_that_would_deadlock_are_refused_by_the_config_check():
    cfg = ReplayLoopConfig(batch_size=256, start_training=1000, samples_per_insert=1.0, spi_tolerance=0.1)
    with pytest.raises(ConfigError, match=r"sac.spi_tolerance to at least 0.129"):
        cfg.check("sac")
    ReplayLoopConfig(batch_size=256, start_training=1285, samples_per_insert=1.0, spi_tolerance=0.1).check("sac")


def test_max_staleness_evicts_by_the_version_that_collected_the_rows():
    """Rows a source tags as collected 3 versions back, with max_staleness=2: stale as they arrive, never
    learned from (the learner's version at arrival would have made them fresh)."""
    cfg = ReplayLoopConfig(buffer_size=1000, batch_size=4, start_training=8, updates_per_step=1.0, max_staleness=2)
    algo = VersionedAlgo()
    algo.policy.version = 10
    rounds = ReplayRounds(algo, CountingSource(6, algo, lag=3), cfg, seed=0, total_steps=10_000)
    learner = Learner(rounds.learning)
    _run(rounds, learner, 10)
    assert algo.seen == [] and rounds.buffer.evicted > 0


def test_sampled_staleness_is_reported_from_the_collecting_version():
    cfg = ReplayLoopConfig(buffer_size=1000, batch_size=4, start_training=8, updates_per_step=0.5, max_staleness=50)
    algo = VersionedAlgo()
    rounds = ReplayRounds(algo, CountingSource(6, algo, lag=1), cfg, seed=0, total_steps=10_000)
    learner = Learner(rounds.learning)
    metrics = {}
    for _ in range(10):
        due, steps = rounds.gather(learner.ctx.env_steps, learner.ctx.updates)
        learner.ctx.env_steps += steps
        metrics = rounds.learning.learn(due) or metrics
    assert algo.seen and all((v <= algo.policy.version - 1).all() for v in algo.seen)
    assert metrics["replay/sampled_staleness_max"] >= metrics["replay/sampled_staleness_mean"] >= 1.0


def test_with_max_use_the_limiter_never_stalls_a_round_that_evicted_everything():
    """max_use=1 evicts every sampled row: a round whose updates found nothing left takes new rows whatever
    the limiter says (else neither side would move again)."""
    rounds, source, learner = _limited(64, max_use=1)
    _run(rounds, learner, 100)
    assert learner.ctx.updates > 20 and source.pulls > 10


def test_the_cli_refuses_a_limiter_that_cannot_be_met_in_one_line_with_exit_2(tmp_path, capsys, monkeypatch):
    from relayrl.cli import main

    monkeypatch.chdir(tmp_path)
    code = main(["train", "dqn", "--env", "CartPole-v1", "--set", "dqn.samples_per_insert=1", "--set",
                 "dqn.batch_size=64", "--set", "dqn.start_training=100", "--run-dir", "run", "--quiet",
                 "--no-tensorboard"])
    err = capsys.readouterr().err
    assert code == 2, err
    lines = [line for line in err.splitlines() if "error" in line]
    assert len(lines) == 1 and "dqn.spi_tolerance to at least 0.325" in lines[0] and "Traceback" not in err
    assert not (tmp_path / "run" / "metrics.jsonl").exists()
