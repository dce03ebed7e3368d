"""ChunkChannel (runtime/backends/channel.py): a writer process killed at any byte costs only its
unfinished chunk; the reader never blocks and never takes a torn message."""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import time

import numpy as np
import pytest

from relayrl.runtime.backends.channel import ChunkChannel
from relayrl.testing.faults import writing


def _chunk(seq: int, salt: int = 0) -> dict:
    size = int(np.random.default_rng([salt, seq]).integers(1, 200_000))  # across the 64 KiB pipe buffer, often
    return {"seq": seq, "data": np.full(size, seq % 251, np.uint8)}


def _write_forever(writer, salt: int) -> None:
    seq = 0
    while True:
        if writer.put(_chunk(seq, salt), timeout=0.1):
            seq += 1


def _whole(msgs: list, first: int, salt: int = 0) -> None:
    for k, msg in enumerate(msgs):
        expected = _chunk(first + k, salt)
        assert msg["seq"] == expected["seq"] and np.array_equal(msg["data"], expected["data"])


@pytest.mark.timeout(120)  # a reader that blocked on a torn message would hang here
def test_a_writer_killed_mid_send_costs_only_its_unfinished_chunk():
    ctx = mp.get_context("fork")
    rng = np.random.default_rng(0)
    torn, offsets, taken = 0, set(), 0
    for salt in range(30):
        channel = ChunkChannel(ctx, capacity=3)
        writer = ctx.Process(target=_write_forever, args=(channel.writer, salt), daemon=True)
        writer.start()
        channel.started()
        try:
            got: list = []
            deadline = time.monotonic() + 10
            while not writing(writer.pid):  # until its feeder blocks inside a write: the pipe is full
                assert time.monotonic() < deadline, "the writer never filled the pipe"
                time.sleep(0.001)
                if not writing(writer.pid):  # (or it waits for room: chunks small enough to fit in the pipe)
                    got += channel.take()
            for _ in range(int(rng.integers(0, 4))):  # the reader makes room, and the writer goes on
                got += channel.take()
            time.sleep(float(rng.uniform(0, 0.002)))
            os.kill(writer.pid, signal.SIGKILL)  # at whatever byte it has reached
            writer.join()
            started = time.monotonic()
            got += channel.take()
            assert time.monotonic() - started < 5  # took what there was, without waiting for more
            _whole(got, 0, salt)  # whole, in order, intact
            taken += len(got)
            assert channel.ended  # the pipe's end is seen: the only writer is gone
            if channel.unfinished:
                torn += 1
                offsets.add(channel.unfinished)
        finally:
            if writer.is_alive():
                writer.kill()
            channel.close()
    print(f"{torn} of 30 writers killed inside a frame, at {len(offsets)} different bytes; {taken} whole chunks")
    assert torn >= 20, torn  # killed in the middle of a frame, nearly always
    assert len(offsets) >= 15, offsets  # at many different bytes of it
    assert taken >= 10  # and the whole chunks before the torn one arrived


def test_the_writer_waits_for_room_once_capacity_chunks_are_on_their_way():
    ctx = mp.get_context("fork")
    channel = ChunkChannel(ctx, capacity=2)
    try:
        assert channel.writer.put(_chunk(0), 0.1) and channel.writer.put(_chunk(1), 0.1)
        assert not channel.writer.put(_chunk(2), 0.1)  # bounded: no room until the reader takes one
        deadline, got = time.monotonic() + 10, []
        while len(got) < 2 and time.monotonic() < deadline:
            got += channel.take()
        _whole(got, 0)
        assert channel.depth() == 0 and channel.writer.put(_chunk(2), 0.1)
    finally:
        channel.close()
