import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from relayrl.data.replay.sumtree import SumTree


@settings(max_examples=60, deadline=None)
@given(capacity=st.integers(1, 70), data=st.data())
def test_sum_and_min_trees_match_brute_force(capacity, data):
    values = np.zeros(capacity)  # an unwritten leaf is 0; the minimum is over positive leaves
    tree = SumTree(capacity)
    for _ in range(data.draw(st.integers(1, 5))):
        idx = np.array(data.draw(st.lists(st.integers(0, capacity - 1), min_size=1, max_size=10)))
        vals = np.array(data.draw(st.lists(st.floats(0.0, 100.0), min_size=len(idx), max_size=len(idx))))
        tree.update(idx, vals)
        for i, v in zip(idx, vals):  # the last write wins, like numpy fancy assignment
            values[i] = v
        assert np.isclose(tree.root, values.sum())
        assert tree.min_positive == (values[values > 0].min() if (values > 0).any() else np.inf)
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
    """PrioritizedSampler.update_items (one compiled pass over sums, running sums and minima; parents
    shared by sorted leaves recomputed once) leaves every node equal to a rebuild from the leaves."""
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
    expected = SumTree(capacity)
    expected.load_leaves(sampler.sum.leaves().copy())
    np.testing.assert_allclose(sampler.sum.tree, expected.tree, rtol=1e-12)
    np.testing.assert_allclose(sampler.sum.cum, expected.cum, rtol=1e-12)
    np.testing.assert_array_equal(sampler.sum.mins, expected.mins)


def _brute_find(values, prefix):
    """The leaf where the running sum of ``values`` first exceeds each prefix value."""
    return np.searchsorted(np.cumsum(values), prefix, side="right")


@pytest.mark.parametrize("capacity", [1, 2, 15, 16, 17, 255, 256, 257, 4097])
def test_capacities_that_are_not_a_power_of_the_arity_search_like_brute_force(capacity):
    rng = np.random.default_rng(capacity)
    values = rng.random(capacity) * (rng.random(capacity) < 0.7)  # about 30% of the leaves empty
    values[rng.integers(capacity)] = 1.0  # at least one positive leaf
    tree = SumTree(capacity)
    tree.update(np.arange(capacity), values)
    assert np.isclose(tree.root, values.sum()) and tree.min_positive == values[values > 0].min()
    prefix = np.sort(rng.random(500)) * values.sum() * (1 - 1e-12)
    found, weight = tree.find_with_weights(prefix)
    np.testing.assert_array_equal(found, _brute_find(values, prefix))
    np.testing.assert_array_equal(weight, values[found])
    assert np.all(values[found] > 0)


def test_empty_leaves_are_never_chosen_even_at_the_edges_of_the_total():
    values = np.zeros(300)
    values[[0, 17, 255, 256, 299]] = [0.5, 2.0, 1e-9, 3.0, 0.25]
    tree = SumTree(300)
    tree.update(np.arange(300), values)
    total = tree.root
    edges = np.array([0.0, 0.5, np.nextafter(0.5, 0), 2.5, 2.5 + 1e-9, total * (1 - 1e-16), total, total * 1.5])
    found = tree.find(edges)  # values at or past the total (rounding) take the last non-empty leaf
    assert set(found.tolist()) <= {0, 17, 255, 256, 299}
    np.testing.assert_array_equal(found[:5], _brute_find(values, edges[:5]))
    assert found[-1] == found[-2] == 299
    tree.update(np.array([299, 256, 255, 17, 0]), 0.0)  # all empty again
    assert tree.root == 0.0 and tree.min_positive == np.inf


def test_min_positive_follows_updates_that_raise_and_empty_the_smallest_leaf():
    tree = SumTree(40)
    tree.update(np.arange(40), np.arange(1.0, 41.0))
    assert tree.min_positive == 1.0
    tree.update(np.array([0]), 50.0)  # the minimum rises: a min tree, not a running minimum
    assert tree.min_positive == 2.0
    tree.update(np.array([1, 2]), 0.0)  # evicted leaves do not count
    assert tree.min_positive == 4.0


def test_prioritized_sampling_after_the_ring_wraps_follows_the_priorities():
    """The leaves of overwritten rows restart at the largest priority; stale updates are skipped."""
    from relayrl.data.replay import ReplayBuffer

    buf = ReplayBuffer(20, sampler="prioritized", alpha=1.0, eps=0.0, seed=1)
    first = buf.add({"x": np.arange(20.0)[:, None]})
    buf.update_priorities(first, np.full(20, 0.5))
    second = buf.add({"x": np.arange(20.0, 25.0)[:, None]})  # rows 0-4 wrap: priority max_priority (1.0)
    assert buf.update_priorities(first[:5], np.full(5, 9.0)) == 0  # their items are gone
    buf.update_priorities(second, np.array([4.0, 0.0, 0.0, 0.0, 4.0]))  # two new items, the others never
    counts = np.bincount(np.concatenate([buf.sample(64)["index"] % 20 for _ in range(300)]), minlength=20)
    expected = np.array([4.0, 0, 0, 0, 4.0] + [0.5] * 15)
    np.testing.assert_allclose(counts / counts.sum(), expected / expected.sum(), atol=0.01)
    assert counts[1:4].sum() == 0
