import random

from relayrl.net.seen import WINDOW, Senders, SeenSet


def test_add_reports_new_and_repeated_seqs():
    seen = SeenSet()
    assert not seen.contains(0)
    assert seen.add(0) is True
    assert seen.contains(0)
    assert seen.add(0) is False
    assert seen.add(1) is True and seen.add(1) is False
    assert not seen.contains(2)


def test_out_of_order_seqs_are_held_above_the_floor_until_the_gap_fills():
    seen = SeenSet()
    for seq in (0, 1, 4, 3, 6):
        assert seen.add(seq)
    assert seen.floor == 2 and sorted(seen.above) == [3, 4, 6] and len(seen) == 3
    assert [seen.contains(s) for s in range(8)] == [True, True, False, True, True, False, True, False]
    assert seen.add(3) is False and seen.add(6) is False
    assert seen.add(2) is True
    assert seen.floor == 5 and sorted(seen.above) == [6]
    assert seen.add(5) is True
    assert seen.floor == 7 and len(seen) == 0
    assert all(seen.contains(s) for s in range(7)) and not seen.contains(7)
    assert all(not seen.add(s) for s in range(7))


def test_a_shuffled_stream_matches_a_plain_set():
    rng = random.Random(0)
    seqs = list(range(2000)) * 2
    rng.shuffle(seqs)
    seen, reference = SeenSet(), set()
    for seq in seqs:
        assert seen.add(seq) == (seq not in reference)
        reference.add(seq)
        assert seen.contains(seq)
    assert seen.floor == 2000 and len(seen) == 0


def test_memory_stays_bounded_for_in_order_streams():
    seen = SeenSet()
    worst = 0
    for seq in range(100_000):
        assert seen.add(seq)
        worst = max(worst, len(seen))
    assert worst == 0 and seen.floor == 100_000
    # roughly in order (each seq at most 8 late): the set holds only the gaps in flight
    seen, worst = SeenSet(), 0
    for block in range(0, 100_000, 8):
        for seq in reversed(range(block, block + 8)):
            seen.add(seq)
            worst = max(worst, len(seen))
    assert worst <= 8 and seen.floor == 100_000 and len(seen) == 0


def test_a_gap_that_never_fills_leaves_memory_bounded():
    """Seq 1 was dropped (the relay's queue overflowed, or a worker's backlog): it never arrives, and
    the 10,000 chunks after it must not all be remembered one by one."""
    seen = SeenSet()
    assert seen.add(0)
    worst = 0
    for seq in range(2, 10_002):
        assert seen.add(seq)
        worst = max(worst, len(seen))
    assert worst < WINDOW
    assert len(seen) == 0 and seen.floor == 10_002  # past the gap, nothing is held one by one
    assert not seen.add(10_001) and not seen.add(5_000)  # repeats are still repeats
    assert seen.contains(1)  # given up: a chunk this old can no longer arrive, so it counts as seen


def test_a_late_seq_within_the_window_is_still_taken_once():
    seen = SeenSet(window=8)
    for seq in (0, *range(2, 9)):  # seq 1 late, 7 below the highest: inside the window
        assert seen.add(seq)
    assert seen.floor == 1 and sorted(seen.above) == list(range(2, 9))
    assert seen.add(1) and not seen.add(1)
    assert seen.floor == 9 and len(seen) == 0
    for seq in (10, 11, 12, 13, 14, 15, 16, 17):  # seq 9 late by 8: just out of the window
        seen.add(seq)
    assert seen.floor == 18 and len(seen) == 0 and not seen.add(9)
    seen = SeenSet(window=8)
    seen.add(100)  # a jump: everything more than 8 below it counts as seen at once
    assert seen.floor == 93 and sorted(seen.above) == [100] and seen.add(93) and not seen.add(92)


def test_a_newer_incarnation_starts_afresh_and_the_older_one_is_forgotten():
    senders = Senders()
    old = senders.get("w", 100)
    for seq in range(5):
        old.add(seq)
    new = senders.get("w", 200)  # the worker process restarted under its name: seqs from 0 again
    assert new is not old and new.add(0) and senders.newest("w") == 200
    assert senders.get("w", 100) is None  # the replaced process: neither remembered nor recreated
    assert senders.get("w", 200) is new and len(senders) == 1
    assert senders.get("w", 300, create=False) is None and senders.get("w", 200) is new
    assert senders.get("v", 1) is not None and len(senders) == 2 and "v" in senders
