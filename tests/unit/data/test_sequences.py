"""relayrl.data.sequences: trajectory pieces of a [T, N] rollout, chunks, padding and masks (hand-computed)."""

from __future__ import annotations

import numpy as np

from relayrl.data.sequences import Segments, chunk, minibatches, pad, split_trajectories


def rollout_done() -> np.ndarray:
    # T = 6, N = 3: env 0 ends episodes at steps 1 and 5, env 1 never, env 2 at step 0 and step 2
    done = np.zeros((6, 3), bool)
    done[[1, 5], 0] = True
    done[[0, 2], 2] = True
    return done


def triples(segments: Segments) -> list[tuple[int, int, int]]:
    return list(zip(segments.column.tolist(), segments.start.tolist(), segments.length.tolist()))


def test_columns_are_cut_after_every_done_and_at_the_rollout_end():
    segments = split_trajectories(rollout_done())
    assert triples(segments) == [(0, 0, 2), (0, 2, 4),             # the done at the last step ends nothing more
                                 (1, 0, 6),                        # runs on into the next rollout
                                 (2, 0, 1), (2, 1, 2), (2, 3, 3)]
    assert segments.length.sum() == 6 * 3  # every step in exactly one piece


def test_chunks_cut_pieces_from_their_start_and_zero_keeps_them():
    segments = split_trajectories(rollout_done())
    assert triples(chunk(segments, 4)) == [(0, 0, 2), (0, 2, 4), (1, 0, 4), (1, 4, 2), (2, 0, 1), (2, 1, 2), (2, 3, 3)]
    assert triples(chunk(segments, 2)) == [(0, 0, 2), (0, 2, 2), (0, 4, 2), (1, 0, 2), (1, 2, 2), (1, 4, 2),
                                           (2, 0, 1), (2, 1, 2), (2, 3, 2), (2, 5, 1)]
    assert chunk(segments, 0) is segments


def test_padding_indexes_real_steps_in_order_and_masks_the_rest():
    segments = split_trajectories(rollout_done())
    values = np.arange(18).reshape(6, 3) * 10  # value = 10 * (3 t + n)
    selection = np.array([3, 2, 1])  # (2, 0, 1), (1, 0, 6), (0, 2, 4)
    t, col, mask = pad(segments, selection)
    assert t.shape == col.shape == mask.shape == (3, 6)
    assert mask.sum(1).tolist() == [1, 6, 4]
    padded = values[t, col]
    # padding repeats each piece's last step, so nothing but real data enters a network
    assert padded[0].tolist() == [20] * 6
    assert padded[2].tolist() == [60, 90, 120, 150, 150, 150]
    expected = [values[0, 2], *values[:, 1], *values[2:6, 0]]
    assert padded[mask].tolist() == list(expected)
    assert col.flags.writeable  # a real array: torch.from_numpy takes it without a warning


def test_minibatches_cover_every_piece_once_within_the_size():
    order = np.random.default_rng(0).permutation(10)
    groups = minibatches(order, 4)
    assert [len(g) for g in groups] == [4, 3, 3]
    assert sorted(np.concatenate(groups).tolist()) == list(range(10))
    assert [len(g) for g in minibatches(order[:3], 8)] == [3]
