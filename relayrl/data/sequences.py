"""Trajectories of a [T, N] rollout as sequences for recurrent updates: split, chunk, pad, mask.

A rollout column holds one env's steps in time order; an episode that ends at step t is followed in
the same column by the next one (vector envs autoreset). ``split_trajectories`` cuts every column
after each done step and at the rollout's end, giving whole trajectory pieces as (column, start,
length); ``chunk`` cuts them further into pieces of at most ``seq_len`` steps. ``pad`` turns a
selection of pieces into [B, L] index arrays and a mask, so any [T, N, ...] array becomes a padded
batch by plain indexing::

    segments = chunk(split_trajectories(terminated | truncated), seq_len=16)
    t, col, mask = pad(segments, selection)
    obs_seq = obs[t, col]                     # [B, L, obs_dim]; padding repeats a piece's last step
    state0 = hidden[segments.start[selection], segments.column[selection]]   # the state at each start
    valid_logp = logp[t, col][mask]           # the real steps only, in (sequence, time) order

Padding repeats real data rather than filling in zeros, so nothing non-finite can enter a network,
and it sits after each piece's last step, where a causal network never looks back at it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Segments:
    """Pieces of trajectories in a [T, N] rollout: piece k is ``column[k]``, steps ``start[k]`` to
    ``start[k] + length[k] - 1``."""

    column: np.ndarray  # [S] int64
    start: np.ndarray  # [S] int64
    length: np.ndarray  # [S] int64

    def __len__(self) -> int:
        return len(self.column)


def split_trajectories(done: np.ndarray) -> Segments:
    """Whole trajectory pieces of a rollout: each column is cut after every done step and at its end.

    Args:
        done: [T, N] bool, ``terminated | truncated`` of each step.
    """
    cut = np.array(done, dtype=bool, copy=True)
    cut[-1] = True  # the rollout's end closes every column's last piece
    column, end = np.nonzero(cut.T)  # sorted by column, then by time
    start = np.zeros_like(end)
    start[1:] = end[:-1] + 1
    start[np.r_[True, column[1:] != column[:-1]]] = 0  # a column's first piece starts at step 0
    return Segments(column, start, end - start + 1)


def chunk(segments: Segments, seq_len: int) -> Segments:
    """Cut every piece into consecutive chunks of ``seq_len`` steps (the last one shorter); 0 keeps them."""
    if seq_len <= 0:
        return segments
    pieces = -(-segments.length // seq_len)  # ceil
    owner = np.repeat(np.arange(len(segments)), pieces)
    first = np.cumsum(pieces) - pieces  # index of each piece's first chunk
    offset = (np.arange(len(owner)) - first[owner]) * seq_len
    return Segments(segments.column[owner], segments.start[owner] + offset,
                    np.minimum(seq_len, segments.length[owner] - offset))


def pad(segments: Segments, selection: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Index arrays ``(t, col)`` and ``mask``, each [B, L], for the pieces in ``selection``.

    ``L`` is the longest selected piece. Padded entries repeat the piece's last step and have
    ``mask`` False; ``array[t, col][mask]`` lists the real steps, piece after piece.
    """
    start, length = segments.start[selection], segments.length[selection]
    steps = np.arange(int(length.max()))
    mask = steps[None, :] < length[:, None]
    t = start[:, None] + np.minimum(steps[None, :], length[:, None] - 1)
    col = np.repeat(segments.column[selection][:, None], t.shape[1], axis=1)
    return t, col, mask


def minibatches(order: np.ndarray, size: int) -> list[np.ndarray]:
    """``order`` (a permutation of piece indices) in ceil(len(order) / size) groups of near-equal
    size, at most ``size`` each; unlike step minibatches, no piece is left out."""
    return np.array_split(order, max(1, -(-len(order) // size)))
