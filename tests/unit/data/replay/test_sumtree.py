import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from relayrl.data.replay.sumtree import MinTree, SumTree


@settings(max_examples=60, deadline=None)
@given(capacity=st.integers(1, 70), data=st.data())
def test_sum_and_min_trees_match_brute_force(capacity, data):
    values = np.zeros(capacity)
    written = np.zeros(capacity, bool)  # an unwritten leaf is 0 for the sum tree, +inf for the min tree
    tree, mins = SumTree(capacity), MinTree(capacity)
    for _ in range(data.draw(st.integers(1, 5))):
        idx = np.array(data.draw(st.lists(st.integers(0, capacity - 1), min_size=1, max_size=10)))
        vals = np.array(data.draw(st.lists(st.floats(0.0, 100.0), min_size=len(idx), max_size=len(idx))))
        tree.update(idx, vals)
        mins.update(idx, vals)
        for i, v in zip(idx, vals):  # the last write wins, like numpy fancy assignment
            values[i] = v
            written[i] = True
        assert np.isclose(tree.root, values.sum())
        assert mins.root == values[written].min()
    if values.sum() > 0:
        prefix = np.array(data.draw(st.lists(st.floats(0.0, 0.999999), min_size=1, max_size=20))) * values.sum()
        found = tree.find(prefix)
        cumulative = np.cumsum(values)
        expected = np.minimum(np.searchsorted(cumulative, prefix, side="right"), capacity - 1)
        # ties at a boundary may resolve to either neighbour within float rounding
        assert np.all((found == expected) | np.isclose(cumulative[np.minimum(found, capacity - 1)], prefix)
                      | np.isclose(cumulative[expected], prefix))
        assert np.all(values[found] > 0)  # never lands on an empty leaf


def test_load_leaves_rebuilds_the_tree():
    tree = SumTree(5)
    tree.load_leaves(np.array([1.0, 2.0, 0.0, 4.0, 5.0]))
    assert tree.root == 12.0 and list(tree.find(np.array([0.5, 1.5, 3.5, 7.5]))) == [0, 1, 3, 4]


@settings(max_examples=40, deadline=None)
@given(capacity=st.integers(1, 300), data=st.data())
def test_the_fused_priority_update_keeps_both_trees_exact(capacity, data):
    """PrioritizedSampler.update_items (one compiled pass over both trees, parents shared by sorted
    leaves recomputed once) leaves every node equal to a rebuild from the leaves."""
    from relayrl.data.replay.sampler import PrioritizedSampler

    sampler = PrioritizedSampler(capacity, alpha=0.7, eps=1e-3)
    generation = np.ones(capacity, dtype=np.int64)
    sampler.on_write(np.arange(capacity))
    for _ in range(data.draw(st.integers(1, 4))):
        rows = np.array(data.draw(st.lists(st.integers(0, capacity - 1), min_size=1, max_size=40)))
        if data.draw(st.booleans()):
            rows = np.sort(rows)
        stale = np.array(data.draw(st.lists(st.booleans(), min_size=len(rows), max_size=len(rows))))
        index = np.where(stale, 0, 1) * capacity + rows  # generation 0: overwritten since sampled
        priority = np.array(data.draw(st.lists(st.floats(-50.0, 50.0), min_size=len(rows), max_size=len(rows))))
        assert sampler.update_items(index, priority, generation, None) == int((~stale).sum())
    expected_sum, expected_min = SumTree(capacity), MinTree(capacity)
    expected_sum.load_leaves(sampler.sum.leaves().copy())
    expected_min.load_leaves(sampler.min.leaves().copy())
    np.testing.assert_allclose(sampler.sum.tree, expected_sum.tree, rtol=1e-12)
    np.testing.assert_array_equal(sampler.min.tree, expected_min.tree)
