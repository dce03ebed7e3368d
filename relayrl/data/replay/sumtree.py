"""Sum and min trees over a fixed number of leaves, updated and searched a batch at a time.

The trees are K-ary (K = 16) and stored flat, root first: level d holds K**d nodes from
``offsets[d]``, and node i's children are nodes i*K .. i*K + K - 1 of the next level. Levels start
on a cache-line boundary, so the 16 children of a node are exactly two 64-byte lines; a 1M-leaf
tree has five levels, so a search touches at most ten lines. Searches and updates
run as compiled loops (numba; the per-element numpy version of the same walk cost ~10x more, see
docs/benchmarks.md). Parents are recomputed from their children on every update (no incremental
deltas), so sums never drift.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic

BRANCH = 16
PREFETCH_AHEAD = 8  # queries ahead whose next nodes are fetched while this one is searched


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
def _update(tree, offsets, k, capacity, leaves, values, use_min):
    """Returns False (and writes nothing) if a leaf index is out of range."""
    for q in range(leaves.shape[0]):
        if leaves[q] < 0 or leaves[q] >= capacity:
            return False
    # Level by level over the whole batch: the loads of different leaves are independent, so the
    # CPU overlaps their cache misses (a leaf-by-leaf walk waits for each in turn).
    depth = offsets.shape[0] - 1
    for q in range(leaves.shape[0]):
        tree[offsets[depth] + leaves[q]] = values[q]
    none = tree[:0]
    _recompute(none if use_min else tree, tree if use_min else none, offsets, k, leaves.copy(), depth)
    return True


@njit(cache=True, nogil=True)
def _find(tree, offsets, k, capacity, prefix, out, weight):
    """``out``: the leaf where the running sum passes each prefix value; ``weight``: its value."""
    values = prefix.copy()
    out[:] = 0
    depth = offsets.shape[0] - 1
    n = values.shape[0]
    for d in range(1, depth + 1):  # level by level, like _update
        offset = offsets[d]
        for q in range(n):
            if q + PREFETCH_AHEAD < n:  # the 16 children are two cache lines
                ahead = offset + out[q + PREFETCH_AHEAD] * k
                _prefetch(tree, ahead)
                _prefetch(tree, ahead + k - 1)
            first = offset + out[q] * k
            value = values[q]
            chosen = -1
            last_positive = 0
            for c in range(k):
                w = tree[first + c]
                if w > 0.0:
                    last_positive = c
                    if value < w:
                        chosen = c
                        break
                    value -= w
            if chosen < 0:  # rounding carried the value past the last non-empty child
                chosen = last_positive
                value = tree[first + chosen]
            values[q] = value
            out[q] = out[q] * k + chosen
    for q in range(out.shape[0]):
        out[q] = min(out[q], capacity - 1)
        weight[q] = tree[offsets[depth] + out[q]]


@njit(cache=True, nogil=True)
def _recompute(sum_tree, min_tree, offsets, k, nodes, depth):
    """Recompute the ancestors of the leaves ``nodes`` (overwritten in place) from their children, in
    a sum tree and/or a min tree of the same layout (an empty array: that tree is skipped), skipping
    a parent just recomputed for the previous leaf (sorted leaves share upper levels)."""
    sums, mins = sum_tree.shape[0] > 0, min_tree.shape[0] > 0
    for d in range(depth, 0, -1):
        offset, parent_offset = offsets[d], offsets[d - 1]
        previous = -1
        for q in range(nodes.shape[0]):
            parent = nodes[q] // k
            nodes[q] = parent
            if parent == previous:
                continue
            previous = parent
            first = offset + parent * k
            if sums:
                total = sum_tree[first]
                for c in range(first + 1, first + k):
                    total += sum_tree[c]
                sum_tree[parent_offset + parent] = total
            if mins:
                least = min_tree[first]
                for c in range(first + 1, first + k):
                    least = min(least, min_tree[c])
                min_tree[parent_offset + parent] = least


@njit(cache=True, nogil=True)
def _apply_priorities(sum_tree, min_tree, offsets, k, capacity, index, priority, generation, live, eps, alpha):
    """Prioritized replay's update in one pass: keep the items whose row still holds them (same
    generation, and live if ``live`` is non-empty), set both trees' leaves to (|p| + eps)^alpha,
    recompute their ancestors. Returns (items applied, largest |p| + eps applied), or (-1, 0) and
    writes nothing if a priority is not finite."""
    n = index.shape[0]
    rows = np.empty(n, np.int64)
    values = np.empty(n, np.float64)
    kept = 0
    largest = 0.0
    for q in range(n):
        p = abs(priority[q]) + eps
        if not np.isfinite(p):
            return -1, 0.0
        row = index[q] % capacity
        if index[q] // capacity != generation[row] or (live.shape[0] > 0 and not live[row]):
            continue
        rows[kept] = row
        values[kept] = p ** alpha
        largest = max(largest, p)
        kept += 1
    depth = offsets.shape[0] - 1
    for q in range(kept):
        sum_tree[offsets[depth] + rows[q]] = values[q]
        min_tree[offsets[depth] + rows[q]] = values[q]
    _recompute(sum_tree, min_tree, offsets, k, rows[:kept], depth)  # one walk for both trees
    return kept, largest


@njit(cache=True, nogil=True)
def _sample_prioritized(tree, offsets, k, capacity, raw, live, min_leaf, beta, rows, weights):
    """Stratified proportional sampling: draw i falls in the i-th of n equal slices of the total
    (``raw``: 64 random bits per draw), searched down the tree; IS weights (live * P(i))^-beta
    divided by the largest possible weight, that of the smallest priority."""
    n = raw.shape[0]
    total = tree[0]
    prefix = np.empty(n, np.float64)
    for q in range(n):
        u = (raw[q] >> np.uint64(11)) * (1.0 / 9007199254740992.0)  # 53 bits -> [0, 1)
        prefix[q] = min((q + u) * (total / n), total * (1 - 1e-12))
    leaf = np.empty(n, np.float64)
    _find(tree, offsets, k, capacity, prefix, rows, leaf)
    max_weight = (live * min_leaf / total) ** -beta
    for q in range(n):
        weights[q] = (live * leaf[q] / total) ** -beta / max_weight


class SegmentTree:
    """``levels[0]`` holds the leaves (padded to a power of K); ``levels[-1]`` is the root level.
    Every level is a view into one flat array, ``tree``."""

    def __init__(self, capacity: int, neutral: float, use_min: bool, branch: int = BRANCH):
        self.capacity, self.neutral, self.use_min, self.k = capacity, neutral, use_min, branch
        size, depth = 1, 0
        while size < capacity:
            size, depth = size * branch, depth + 1
        line = 8  # float64s per 64-byte cache line
        offsets, pos = [], 0
        for d in range(depth + 1):
            offsets.append(pos)
            pos += -(-branch**d // line) * line
        raw = np.full(pos + line, neutral, dtype=np.float64)
        start = (-raw.ctypes.data // 8) % line  # first element on a cache-line boundary
        self.tree = raw[start:start + pos]
        self.offsets = np.array(offsets, dtype=np.int64)
        self.levels = [self.tree[offsets[d]:offsets[d] + branch**d] for d in range(depth, -1, -1)]

    def update(self, index: np.ndarray, value: np.ndarray | float) -> None:
        """Set leaves ``index`` to ``value`` (the last write wins for repeated indices)."""
        index = np.ascontiguousarray(index, dtype=np.int64).reshape(-1)
        if np.ndim(value) == 0:
            values = np.full(len(index), value, dtype=np.float64)
        else:
            values = np.ascontiguousarray(value, dtype=np.float64).reshape(-1)
            if len(values) != len(index):
                raise ValueError(f"{len(index)} leaves but {len(values)} values")
        if not _update(self.tree, self.offsets, self.k, self.capacity, index, values, self.use_min):
            raise IndexError(f"leaf index out of range [0, {self.capacity})")

    def __getitem__(self, index) -> np.ndarray:
        return self.levels[0][np.asarray(index, dtype=np.int64)]

    @property
    def root(self) -> float:
        return float(self.tree[0])

    def leaves(self) -> np.ndarray:
        return self.levels[0][:self.capacity]

    def load_leaves(self, values: np.ndarray) -> None:
        reduce = np.minimum if self.use_min else np.add
        self.levels[0][:] = self.neutral
        self.levels[0][:len(values)] = values
        for j in range(1, len(self.levels)):
            self.levels[j][:] = reduce.reduce(self.levels[j - 1].reshape(-1, self.k), axis=1)


class SumTree(SegmentTree):
    def __init__(self, capacity: int, branch: int = BRANCH):
        super().__init__(capacity, 0.0, False, branch)

    def find(self, prefix: np.ndarray) -> np.ndarray:
        """For each value in ``prefix`` (in [0, root)), the leaf where the running sum passes it;
        leaves of weight 0 are never chosen."""
        return self.find_with_weights(prefix)[0]

    def find_with_weights(self, prefix: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``find`` and the chosen leaves' values, in one pass."""
        prefix = np.ascontiguousarray(prefix, dtype=np.float64).reshape(-1)
        out, weight = np.empty(len(prefix), dtype=np.int64), np.empty(len(prefix), dtype=np.float64)
        _find(self.tree, self.offsets, self.k, self.capacity, prefix, out, weight)
        return out, weight


class MinTree(SegmentTree):
    def __init__(self, capacity: int, branch: int = BRANCH):
        super().__init__(capacity, np.inf, True, branch)
