"""relayrl.data.replay.ratelimit: the samples-per-insert bound, which side it holds back, and the bounds it refuses."""

from __future__ import annotations

import pytest

from relayrl.data.replay.ratelimit import RateLimiter, limiter_bounds_problem
from relayrl.errors import ConfigError


def _drive(limiter, batch, insert_rows, learner_share, rounds=2000):
    """Alternate the two sides: the collectors insert ``insert_rows`` whenever allowed; the learner runs all
    the updates it may every ``learner_share``-th turn, at most one otherwise (a slow learner); returns the
    diffs seen after every step once min_size rows are in."""
    diffs = []
    for k in range(rounds):
        limiter.insert(limiter.insertable(insert_rows))
        if limiter.inserted >= limiter.min_size:
            diffs.append(limiter.diff())
        allowed = limiter.updates_allowed(batch)
        limiter.sample(batch * (allowed if k % learner_share == 0 else min(allowed, 1)))
        if limiter.inserted >= limiter.min_size:
            diffs.append(limiter.diff())
    return diffs


@pytest.mark.parametrize("insert_rows", [1, 7, 40])
@pytest.mark.parametrize("learner_share", [1, 5])
def test_the_diff_stays_within_the_error_buffer_and_one_insert_above_it(insert_rows, learner_share):
    """Whichever side is faster, samples never pass spi x (inserts - min_size) + error_buffer, and inserts,
    let in as far as the bound allows, never take the diff past error_buffer; neither side stalls for good."""
    limiter = RateLimiter.from_tolerance(2.0, 0.1, min_size=100, batch=16)  # error buffer 0.1 x 2 x 100 = 20 rows
    assert limiter.error_buffer == pytest.approx(20.0)
    diffs = _drive(limiter, 16, insert_rows, learner_share)
    assert min(diffs) >= -limiter.error_buffer  # the learner never ran past the bound
    assert max(diffs) <= limiter.error_buffer  # nor the collectors
    assert limiter.sampled > 0 and limiter.inserted > 1000  # both sides kept moving
    assert limiter.measured() == pytest.approx(2.0, rel=0.1)


def test_nothing_is_sampled_before_min_size_and_inserts_are_never_held_back_then():
    limiter = RateLimiter.from_tolerance(1.0, 0.5, min_size=50, batch=32)
    limiter.insert(49)
    assert limiter.updates_allowed(32) == 0
    assert limiter.insertable(100) == (50 - 49) + 25  # up to min_size, and the error buffer past it
    limiter.insert(1)
    assert limiter.updates_allowed(32) == 0  # diff 0 + error buffer 25 < one update's 32 rows
    limiter.insert(7)
    assert limiter.updates_allowed(32) == 1  # 7 + 25 >= 32
    limiter.sample(32)
    assert limiter.diff() == -25 and limiter.updates_allowed(32) == 0 and limiter.can_insert()


def test_waits_are_counted_once_per_wait_with_their_time():
    limiter = RateLimiter(1.0, 10, 5.0)
    limiter.wait("insert", 1.0)
    limiter.wait("insert", 2.0)  # (still the same wait)
    limiter.resume("insert", 4.0)
    limiter.resume("learner", 5.0)  # (was not waiting: nothing counted)
    limiter.wait("learner", 6.0)
    stats = limiter.stats(now=6.5)
    assert stats["limiter/insert_waits"] == 1 and stats["limiter/insert_wait_s"] == pytest.approx(3.0)
    assert stats["limiter/learner_waits"] == 1 and stats["limiter/learner_wait_s"] == pytest.approx(0.5)


@pytest.mark.parametrize("spi, tolerance, min_size, batch, keys", [
    (0.0, 0.1, 1000, 32, ["samples_per_insert=0", "> 0"]),
    (-1.0, 0.1, 1000, 32, ["samples_per_insert=-1", "> 0"]),
    (1.0, -0.1, 1000, 32, ["spi_tolerance=-0.1", ">= 0"]),
    (1.0, 0.1, 100, 64, ["batch_size", "spi_tolerance to at least 0.325", "start_training to at least 325",
                         "batch_size to at most 19"]),
    (1.0, 0.0, 1000, 32, ["spi_tolerance to at least 0.0165", "wait for the"]),
])
def test_bounds_that_cannot_be_met_one_update_at_a_time_are_refused_with_the_fix(spi, tolerance, min_size, batch, keys):
    problem = limiter_bounds_problem(spi, tolerance, min_size, batch, "dqn")
    assert all(key in problem for key in keys), problem
    with pytest.raises(ConfigError) as info:
        RateLimiter.from_tolerance(spi, tolerance, min_size, batch, "dqn")
    assert str(info.value) == problem and info.value.exit_code == 2


def test_the_smallest_error_buffer_it_accepts_still_lets_both_sides_move():
    """2 x error_buffer == batch + samples_per_insert: accepted, and the sides take turns without a deadlock;
    a hair less is refused."""
    assert limiter_bounds_problem(1.0, 0.165, 100, 32) == ""
    assert limiter_bounds_problem(1.0, 0.164, 100, 32) != ""
    limiter = RateLimiter.from_tolerance(1.0, 0.165, min_size=100, batch=32)
    _drive(limiter, 32, 1, 1)
    assert limiter.sampled >= 32 * 50 and limiter.inserted >= 1900
