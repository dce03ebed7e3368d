"""A sum tree over a fixed number of leaves, updated and searched a batch at a time, which also keeps
the smallest positive leaf (prioritized replay's largest importance weight).

The tree is K-ary (K = 16) and stored flat, root first: level d holds K**d nodes from ``offsets[d]``,
node i's children are nodes i*K .. i*K + K - 1 of the next level, and the leaves (level ``depth``)
are the values. Three arrays share that layout, each level starting on a cache-line boundary (the 16
children of a node are two 64-byte lines):

- ``tree``: every node's sum, recomputed from its children on every update (no incremental deltas,
  so sums never drift).
- ``cum`` (levels 1 .. depth-1): each node's running sum over its siblings up to and including it.
  A search step is then ``count(cum[children] <= value)``: K independent comparisons, where a walk
  over the children's sums is a chain of dependent subtractions with a mispredicted exit (measured:
  a 1M-leaf search of 256 values 35 -> 21 us). The leaf level is searched by that walk in ``tree``:
  it is what an update reads back, so the lines it fetches serve both.
- ``mins`` (levels 0 .. depth-1): the minimum over the positive leaves below (+inf when none). It
  has no leaf level of its own, so an update touches no extra cold lines for it.

Searches and updates are compiled loops (numba) that walk the batch level by level: the loads of
different queries are independent, so the CPU overlaps their cache misses, and the search
prefetches the nodes of queries a few ahead.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic

K = 16  # children per node (a compile-time constant of the loops below)
PREFETCH_AHEAD = 8  # queries ahead whose next nodes are fetched while this one is searched
_LINE = 8  # float64s per 64-byte cache line


@intrinsic
def _prefetch(typingctx, array, index):
    """Hint the CPU to load ``array[index]``'s cache line (LLVM's prefetch: read, keep in all
    levels). Searching many values level by level, the next values' nodes are known in advance, so
    their cache misses overlap instead of stalling each search in turn."""
    def codegen(context, builder, signature, args):
        data = context.make_array(signature.args[0])(context, builder, args[0]).data
        byte_ptr = ir.IntType(8).as_pointer()
        i32 = ir.IntType(32)
        fn_type = ir.FunctionType(ir.VoidType(), [byte_ptr, i32, i32, i32])
        name = "llvm.prefetch.p0"
        fn = builder.module.globals.get(name) or ir.Function(builder.module, fn_type, name=name)
        address = builder.bitcast(builder.gep(data, [args[1]]), byte_ptr)
        builder.call(fn, [address, ir.Constant(i32, 0), ir.Constant(i32, 3), ir.Constant(i32, 1)])
        return context.get_dummy_value()
    return types.void(array, index), codegen


@njit(cache=True, nogil=True)
def _refresh(tree, cum, mins, offsets, nodes):
    """Recompute every ancestor of the leaves ``nodes`` (overwritten in place): a parent's sum and
    minimum from its K children, and the children's running sums. A parent just recomputed for the
    previous leaf is skipped (sorted leaves, as a stratified sample gives, share upper levels). The
    children of the parent a few leaves ahead are prefetched: after a sample, most of these lines
    are not cached yet."""
    depth = offsets.shape[0] - 1
    n = nodes.shape[0]
    for d in range(depth, 0, -1):
        offset, parent_offset = offsets[d], offsets[d - 1]
        previous = -1
        for q in range(n):
            if q + PREFETCH_AHEAD < n:
                ahead = offset + (nodes[q + PREFETCH_AHEAD] // K) * K
                _prefetch(tree, ahead)
                _prefetch(tree, ahead + K - 1)
                if d < depth:
                    _prefetch(mins, ahead)
                    _prefetch(mins, ahead + K - 1)
                    _prefetch(cum, ahead)
                    _prefetch(cum, ahead + K - 1)
            parent = nodes[q] // K
            nodes[q] = parent
            if parent == previous:
                continue
            previous = parent
            first = offset + parent * K
            total = 0.0
            least = np.inf
            if d == depth:  # leaves: the minimum is over positive ones (0 is empty or evicted)
                for c in range(first, first + K):
                    w = tree[c]
                    total += w
                    least = min(least, w if w > 0.0 else np.inf)
            else:
                for c in range(first, first + K):
                    total += tree[c]
                    cum[c] = total
                    least = min(least, mins[c])
            tree[parent_offset + parent] = total
            mins[parent_offset + parent] = least


@njit(cache=True, nogil=True)
def _update(tree, cum, mins, offsets, capacity, leaves, values):
    """Returns False (and writes nothing) if a leaf index is out of range."""
    for q in range(leaves.shape[0]):
        if leaves[q] < 0 or leaves[q] >= capacity:
            return False
    depth = offsets.shape[0] - 1
    for q in range(leaves.shape[0]):
        tree[offsets[depth] + leaves[q]] = values[q]
    _refresh(tree, cum, mins, offsets, leaves.copy())
    return True


@njit(cache=True, nogil=True)
def _last_positive(tree, first):
    last = 0
    for c in range(K):
        if tree[first + c] > 0.0:
            last = c
    return last


@njit(cache=True, nogil=True)
def _find(tree, cum, offsets, capacity, values, out, weight):
    """``out``: the leaf where the running sum passes each value of ``values`` (consumed);
    ``weight``: its value. A value rounding carried past a node's total takes the node's last
    non-empty child."""
    out[:] = 0
    depth = offsets.shape[0] - 1
    n = values.shape[0]
    for d in range(1, depth):  # internal levels: count the running sums at or below the value
        offset = offsets[d]
        for q in range(n):
            if q + PREFETCH_AHEAD < n:  # the 16 children are two cache lines
                ahead = offset + out[q + PREFETCH_AHEAD] * K
                _prefetch(cum, ahead)
                _prefetch(cum, ahead + K - 1)
            first = offset + out[q] * K
            value = values[q]
            count = 0
            for c in range(K):
                count += cum[first + c] <= value
            if count == K:  # rare: a well-predicted branch
                count = _last_positive(tree, first)
                value = tree[first + count]
            elif count > 0:
                value -= cum[first + count - 1]
            values[q] = value
            out[q] = out[q] * K + count
    offset = offsets[depth]
    for q in range(n):  # the leaves: a walk over their values
        if q + PREFETCH_AHEAD < n:
            ahead = offset + out[q + PREFETCH_AHEAD] * K
            _prefetch(tree, ahead)
            _prefetch(tree, ahead + K - 1)
        first = offset + out[q] * K
        value = values[q]
        chosen = -1
        for c in range(K):
            w = tree[first + c]
            if w > 0.0:
                if value < w:
                    chosen = c
                    break
                value -= w
        if chosen < 0:
            chosen = _last_positive(tree, first)
        out[q] = min(out[q] * K + chosen, capacity - 1)
        weight[q] = tree[offset + out[q]]


@njit(cache=True, nogil=True)
def _apply_priorities(tree, cum, mins, offsets, capacity, index, priority, generation, live, eps, alpha):
    """Prioritized replay's update in one pass: keep the items whose row still holds them (same
    generation, and live if ``live`` is non-empty), set their leaves to (|p| + eps)^alpha, recompute
    their ancestors. Returns (items applied, largest |p| + eps applied), or, writing nothing, (-1, 0)
    if a priority is not finite and (-2, 0) if an item id is negative."""
    n = index.shape[0]
    rows = np.empty(n, np.int64)
    values = np.empty(n, np.float64)
    kept = 0
    largest = 0.0
    leaves = offsets[offsets.shape[0] - 1]
    for q in range(n):
        if q + PREFETCH_AHEAD < n:  # rows at random: fetch their generation and leaf ahead
            ahead = index[q + PREFETCH_AHEAD] % capacity
            _prefetch(generation, ahead)
            _prefetch(tree, leaves + ahead)
        p = abs(priority[q]) + eps
        if not np.isfinite(p):
            return -1, 0.0
        if index[q] < 0:
            return -2, 0.0
        row = index[q] % capacity
        if index[q] // capacity != generation[row] or (live.shape[0] > 0 and not live[row]):
            continue
        rows[kept] = row
        values[kept] = p ** alpha
        largest = max(largest, p)
        kept += 1
    depth = offsets.shape[0] - 1
    for q in range(kept):
        tree[offsets[depth] + rows[q]] = values[q]
    _refresh(tree, cum, mins, offsets, rows[:kept])
    return kept, largest


@njit(cache=True, nogil=True)
def _sample_prioritized(tree, cum, mins, offsets, capacity, raw, beta, rows, weights):
    """Stratified proportional sampling: draw i falls in the i-th of n equal slices of the total
    (``raw``: 64 random bits per draw), searched down the tree; IS weights (N * P(i))^-beta divided
    by the largest possible one, that of the smallest positive priority: (p_i / p_min)^-beta
    (computed in float32, the weights' dtype: half the cost of a float64 power)."""
    n = raw.shape[0]
    total = tree[0]
    prefix = np.empty(n, np.float64)
    for q in range(n):
        u = (raw[q] >> np.uint64(11)) * (1.0 / 9007199254740992.0)  # 53 bits -> [0, 1)
        prefix[q] = min((q + u) * (total / n), total * (1 - 1e-12))
    leaf = np.empty(n, np.float64)
    _find(tree, cum, offsets, capacity, prefix, rows, leaf)
    least = mins[0]
    exponent = np.float32(-beta)
    for q in range(n):
        weights[q] = np.float32(leaf[q] / least) ** exponent


def _aligned(size: int, fill: float) -> np.ndarray:
    """``size`` float64s filled with ``fill``, the first on a cache-line boundary."""
    raw = np.full(size + _LINE, fill, dtype=np.float64)
    start = (-raw.ctypes.data // 8) % _LINE
    return raw[start:start + size]


class SumTree:
    """Sums (and the smallest positive leaf) over ``capacity`` leaves, all 0 to begin with.
    ``levels[0]`` is the leaf level (padded to a power of K), ``levels[-1]`` the root; each is a view
    into ``tree``."""

    def __init__(self, capacity: int):
        self.capacity = capacity
        size, depth = 1, 0
        while size < capacity or depth == 0:  # at least one level below the root
            size, depth = size * K, depth + 1
        offsets, pos = [], 0
        for d in range(depth + 1):
            offsets.append(pos)
            pos += -(-K**d // _LINE) * _LINE
        self.tree = _aligned(pos, 0.0)
        self.cum = _aligned(offsets[depth], 0.0)
        self.mins = _aligned(offsets[depth], np.inf)
        self.offsets = np.array(offsets, dtype=np.int64)
        self.levels = [self.tree[offsets[d]:offsets[d] + K**d] for d in range(depth, -1, -1)]

    def update(self, index: np.ndarray, value: np.ndarray | float) -> None:
        """Set leaves ``index`` to ``value`` (>= 0; the last write wins for repeated indices)."""
        index = np.ascontiguousarray(index, dtype=np.int64).reshape(-1)
        if np.ndim(value) == 0:
            values = np.full(len(index), value, dtype=np.float64)
        else:
            values = np.ascontiguousarray(value, dtype=np.float64).reshape(-1)
            if len(values) != len(index):
                raise ValueError(f"{len(index)} leaves but {len(values)} values")
        if not _update(self.tree, self.cum, self.mins, self.offsets, self.capacity, index, values):
            raise IndexError(f"leaf index out of range [0, {self.capacity})")

    def __getitem__(self, index) -> np.ndarray:
        return self.levels[0][np.asarray(index, dtype=np.int64)]

    @property
    def root(self) -> float:
        return float(self.tree[0])

    @property
    def min_positive(self) -> float:
        """The smallest positive leaf (+inf when every leaf is 0)."""
        return float(self.mins[0])

    def leaves(self) -> np.ndarray:
        return self.levels[0][:self.capacity]

    def load_leaves(self, values: np.ndarray) -> None:
        self.levels[0][:] = 0.0
        self.levels[0][:len(values)] = values
        depth = len(self.offsets) - 1
        for d in range(depth, 0, -1):  # sums as _refresh makes them: running sums, left to right
            children = self.tree[self.offsets[d]:self.offsets[d] + K**d].reshape(-1, K)
            running = np.cumsum(children, axis=1)
            self.tree[self.offsets[d - 1]:self.offsets[d - 1] + K**(d - 1)] = running[:, -1]
            if d < depth:
                self.cum[self.offsets[d]:self.offsets[d] + K**d] = running.reshape(-1)
                least = self.mins[self.offsets[d]:self.offsets[d] + K**d].reshape(-1, K).min(axis=1)
            else:
                least = np.where(children > 0, children, np.inf).min(axis=1)
            self.mins[self.offsets[d - 1]:self.offsets[d - 1] + K**(d - 1)] = least

    def find(self, prefix: np.ndarray) -> np.ndarray:
        """For each value in ``prefix`` (in [0, root)), the leaf where the running sum passes it;
        leaves of weight 0 are never chosen."""
        return self.find_with_weights(prefix)[0]

    def find_with_weights(self, prefix: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``find`` and the chosen leaves' values, in one pass."""
        values = np.array(prefix, dtype=np.float64).reshape(-1)  # a copy: the search consumes it
        out, weight = np.empty(len(values), dtype=np.int64), np.empty(len(values), dtype=np.float64)
        _find(self.tree, self.cum, self.offsets, self.capacity, values, out, weight)
        return out, weight
