import multiprocessing as mp

import numpy as np
import pytest
import torch

from relayrl.runtime.weights import WeightBoard, board_layout, flatten, unflatten


def _weights(scale: float) -> dict:
    return {"model": {"fc.weight": torch.full((3, 2), scale), "fc.bias": torch.zeros(3)},
            "obs_rms": {"mean": np.full(2, scale), "count": 5.0, "steps": 7}}


def test_flatten_round_trip_keeps_structure_kinds_and_values():
    arrays, kinds = flatten(_weights(1.5))
    assert set(arrays) == {"model/fc.weight", "model/fc.bias", "obs_rms/mean", "obs_rms/count", "obs_rms/steps"}
    back = unflatten(arrays, kinds)
    assert isinstance(back["model"]["fc.weight"], torch.Tensor) and back["model"]["fc.weight"][0, 0] == 1.5
    assert isinstance(back["obs_rms"]["mean"], np.ndarray) and back["obs_rms"]["count"] == 5.0
    assert isinstance(back["obs_rms"]["steps"], int) and back["obs_rms"]["steps"] == 7
    with pytest.raises(TypeError, match="cannot broadcast"):
        flatten({"bad": object()})


def _reader(name, layout, out):
    """Reads until it has seen 20 versions (at least 3000 reads; a loaded machine interleaves the
    writer and the reader coarsely) or 20 s have passed."""
    import time

    board = WeightBoard.attach(name, layout)
    consistent, reads, versions = 0, 0, set()
    deadline = time.monotonic() + 20
    while (reads < 3000 or len(versions) < 20) and time.monotonic() < deadline:
        arrays, version, steps = board.read()
        weight = arrays["model/fc.weight"]
        # a consistent copy: every element from the same write, matching the version stamp
        consistent += bool(np.all(weight == version) and steps == 10 * version) if version >= 0 else 1
        versions.add(version)
        reads += 1
    board.close()
    out.put((consistent, reads, len(versions)))


def test_board_readers_in_other_processes_never_see_a_torn_write():
    arrays, _ = flatten(_weights(0.0))
    board = WeightBoard.create(arrays)
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    reader = ctx.Process(target=_reader, args=(board.name, board_layout(arrays), out))
    reader.start()
    try:
        version, result = 0, None
        while result is None:  # keep writing while the reader reads
            board.write(flatten(_weights(float(version)))[0], version, env_steps=version * 10)
            version += 1
            if version % 50 == 0 and not out.empty():
                result = out.get()
            assert version < 10_000_000
        consistent, reads, distinct = result
        assert consistent == reads and distinct > 10  # the reads really overlapped many writes
    finally:
        reader.join(timeout=10)
        board.close()
    assert reader.exitcode == 0


def test_a_board_left_mid_write_times_out_with_a_clear_error():
    arrays, _ = flatten(_weights(0.0))
    board = WeightBoard.create(arrays)
    try:
        board.header[0] += 1  # a writer that died between its two counter bumps
        with pytest.raises(TimeoutError, match="writer died"):
            board.read(timeout=0.05)
    finally:
        board.close()


def test_a_publish_older_than_the_board_is_ignored():
    """Two publishes can reach a node out of order (a Ray node proxy runs two calls at once): the
    board keeps the newer version and its weights."""
    board = WeightBoard.create(flatten(_weights(0.0))[0])
    try:
        assert board.write(flatten(_weights(2.0))[0], 2, env_steps=20)
        assert not board.write(flatten(_weights(1.0))[0], 1, env_steps=10)
        arrays, version, steps = board.read()
        assert (version, steps) == (2, 20) and np.all(arrays["model/fc.weight"] == 2.0)
        assert board.write(flatten(_weights(3.0))[0], 3, env_steps=30) and board.version == 3
    finally:
        board.close()
