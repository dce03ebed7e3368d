"""The "frames" replay layout returns exactly what the plain layout returns, holding each frame once."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from relayrl.data.nstep import NStepAccumulator
from relayrl.data.replay import FrameStorage, ReplayBuffer, choose_layout
from relayrl.data.replay.storage import ArrayStorage
from relayrl.errors import CheckpointError

H, W = 6, 7


def stream_batches(seed, num_envs, k, n_step, steps, chunk, blank=0.2):
    """Transitions of ``num_envs`` envs stepping together, observations stacked like Gymnasium's
    FrameStackObservation(padding_type="reset") (k == 0: one unstacked [H, W, 2] image), episodes of
    random lengths ending by termination or truncation, through the real n-step accumulator, handed
    over in batches of ``chunk`` vector steps (so envs' rows interleave)."""
    rng = np.random.default_rng(seed)

    def frame():  # few values and a common blank frame: equal frames across envs and episodes happen
        if blank == 0:
            return rng.integers(0, 256, (H, W), dtype=np.uint8)
        return np.zeros((H, W), np.uint8) if rng.random() < blank else rng.integers(0, 3, (H, W), dtype=np.uint8)

    def observe(stack):
        return np.stack(stack) if k else np.stack([stack[-1], stack[-1] // 2], axis=-1)

    depth = max(k, 1)
    stacks = [[frame()] * depth for _ in range(num_envs)]
    acc = NStepAccumulator(n_step, 0.9, num_envs)
    pending = []
    for t in range(steps):
        obs = np.stack([observe(s) for s in stacks])
        ends = rng.random(num_envs) < 0.15
        terminated = ends & (rng.random(num_envs) < 0.5)
        truncated = ends & ~terminated
        final = []
        for i in range(num_envs):
            stacks[i] = stacks[i][1:] + [frame()]
            final.append(observe(stacks[i]))
            if ends[i]:  # autoreset: the next observation is a fresh stack of the reset frame
                stacks[i] = [frame()] * depth
        out = acc.push(obs, rng.integers(0, 4, num_envs), rng.random(num_envs).astype(np.float32), np.stack(final),
                       terminated, truncated)
        if out:
            pending.append(out)
        if len(pending) >= chunk or t == steps - 1:
            if pending:
                yield {key: np.concatenate([p[key] for p in pending]) for key in pending[0]}
            pending = []


def assert_same(frames: FrameStorage, plain: ArrayStorage, live=None):
    rows = plain.oldest_rows() if live is None else np.flatnonzero(live)
    got, want = frames.get(rows), plain.get(rows)
    assert got.keys() == want.keys()
    for key in want:
        assert got[key].dtype == want[key].dtype, key
        np.testing.assert_array_equal(got[key], want[key], err_msg=key)


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**16), num_envs=st.integers(1, 4), k=st.sampled_from([0, 2, 4]),
       n_step=st.integers(1, 3), capacity=st.integers(5, 60), chunk=st.integers(1, 5))
def test_frames_layout_returns_what_the_plain_layout_returns(seed, num_envs, k, n_step, capacity, chunk):
    # a ring of 2 frames per item (at most 1 new per step and 1 per episode start) wraps several times
    frames, plain = FrameStorage(capacity, slots=2 * capacity + 8 * max(k, 1)), ArrayStorage(capacity)
    for batch in stream_batches(seed, num_envs, k, n_step, steps=3 * capacity // num_envs + 5, chunk=chunk):
        np.testing.assert_array_equal(frames.add(batch), plain.add(batch))
        assert len(frames.pop_dropped()) == 0  # env streams share frames: nothing dropped early
        assert_same(frames, plain)
    assert frames.pos == plain.pos and frames.size == plain.size
    np.testing.assert_array_equal(frames.generation, plain.generation)


def test_the_frame_ring_wraps_many_times_without_losing_an_item():
    frames, plain = FrameStorage(50, slots=2 * 50 + 32), ArrayStorage(50)
    for batch in stream_batches(4, 4, 4, 2, steps=300, chunk=2, blank=0):
        frames.add(batch)
        plain.add(batch)
        assert len(frames.pop_dropped()) == 0
    assert_same(frames, plain)
    assert frames.ring.written > 5 * frames.ring.slots


def test_a_stack_costs_one_new_frame_per_step():
    capacity = 400
    storage = FrameStorage(capacity)
    for batch in stream_batches(1, 4, 4, 1, steps=300, chunk=3, blank=0):
        storage.add(batch)
    used = int((storage.ring.user >= storage.written - capacity).sum())
    # one frame per transition plus one per episode start (episodes average ~6.7 steps here)
    assert capacity <= used < capacity * 1.25
    plain_obs_bytes = capacity * 2 * 4 * H * W
    assert used * H * W < plain_obs_bytes / 6


def test_frames_that_share_nothing_drop_the_oldest_items_and_are_never_sampled():
    rng = np.random.default_rng(0)
    buf = ReplayBuffer(20, layout="frames", frame_slots=50, seed=0)  # 20 items sharing nothing need 80
    plain = ArrayStorage(20)
    for start in range(0, 200, 7):
        batch = {"obs": rng.integers(0, 255, (7, 2, H, W), dtype=np.uint8),
                 "next_obs": rng.integers(0, 255, (7, 2, H, W), dtype=np.uint8),
                 "action": np.arange(start, start + 7)}
        buf.add(batch)
        plain.add(batch)
        assert_same(buf.storage, plain, live=buf.live)  # every live item is intact
    assert 0 < len(buf) < 20 and buf.evicted > 0
    seen = buf.sample(500)["action"]
    assert set(seen.tolist()) <= set(buf.storage.arrays["action"][buf.live].tolist())


@pytest.mark.parametrize("sampler", ["uniform", "prioritized"])
def test_sampling_priorities_and_save_load_with_frames(tmp_path, sampler):
    buf = ReplayBuffer(30, layout="frames", sampler=sampler, seed=3)
    for batch in stream_batches(2, 3, 4, 3, steps=40, chunk=2):
        index = buf.add(batch)
    s = buf.sample(16)
    assert s["obs"].shape == (16, 4, H, W) and s["obs"].dtype == np.uint8
    assert buf.update_priorities(index, np.arange(len(index), dtype=float) + 1) == len(index)
    buf.save(tmp_path / "replay.safetensors")
    again = ReplayBuffer(30, layout="frames", sampler=sampler, seed=3)
    again.load(tmp_path / "replay.safetensors")
    assert_same(again.storage, buf.storage)
    a, b = buf.sample(16), again.sample(16)
    for key in a:
        np.testing.assert_array_equal(a[key], b[key])
    for batch in stream_batches(5, 3, 4, 3, steps=20, chunk=2):  # keeps sharing frames after a load
        buf.add(batch)
        again.add(batch)
    assert_same(again.storage, buf.storage)
    assert again.storage.ring.user.max() == buf.storage.ring.user.max()


def test_a_file_of_the_other_layout_is_refused_with_the_fix(tmp_path):
    plain = ReplayBuffer(10)
    plain.add({"obs": np.zeros((3, 2, H, W), np.uint8), "next_obs": np.zeros((3, 2, H, W), np.uint8)})
    plain.save(tmp_path / "r.safetensors")
    with pytest.raises(CheckpointError, match="'plain' layout.*start the replay afresh"):
        ReplayBuffer(10, layout="frames").load(tmp_path / "r.safetensors")


def test_layout_choice():
    assert choose_layout((4, 84, 84)) == "frames" and choose_layout((3, 64, 64)) == "frames"
    assert choose_layout((4,)) == "plain" and choose_layout((3, 8)) == "plain"
    # small planes (MinAtar's [10, 10, C], booleans stored as float32) are cheaper to copy than to intern
    assert choose_layout((10, 10, 10), itemsize=4) == "plain" and choose_layout((10, 10, 16), itemsize=4) == "frames"
