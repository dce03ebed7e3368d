import random

from relayrl.net.seen import SeenSet


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
