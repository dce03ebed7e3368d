"""A learner whose peer dies or hangs gets a LearnerGroupError from its next collective, within the group's timeout,
instead of waiting forever (real processes, gloo on 127.0.0.1)."""

from __future__ import annotations

from relayrl.testing.learners import run_group


def test_a_learner_whose_peer_died_raises_at_its_next_all_reduce():
    (first, _) = run_group(["peer_dies"], size=2, deadline_s=60, timeout_s=30, wait_for=[0])
    out = first["peer_dies"]
    assert not isinstance(out, str), out
    error = str(out["error"])
    assert error.startswith("LearnerGroupError: learner 0 of 2: all_reduce failed"), error
    assert "another learner died" in error
    assert float(out["seconds"]) < 20  # (a closed connection: at once, long before the 30 s timeout)


def test_a_learner_whose_peer_hangs_raises_when_the_timeout_has_passed():
    (first, _) = run_group(["peer_hangs"], size=2, deadline_s=60, timeout_s=2, wait_for=[0])
    out = first["peer_hangs"]
    assert not isinstance(out, str), out
    error = str(out["error"])
    assert error.startswith("LearnerGroupError: learner 0 of 2:"), error
    assert "within 2 s" in error
    assert 1.5 < float(out["seconds"]) < 30  # (the 2 s timeout, with room for a loaded machine)
