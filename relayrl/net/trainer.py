"""The trainer's end of the relay: ``relayrl train ALGO --env ENV --server HOST:PORT``.

``RelaySource`` is the loop's ``samples=`` source and ``publish=`` sink (like the runtime's worker
pools): ``pull()`` returns the transitions remote workers sent, ``publish(weights, version)``
broadcasts safetensors bytes through the relay. Every chunk is acknowledged once it is taken (the
worker then forgets it); a chunk seen before, by (worker, incarnation, seq), is acknowledged and
dropped, so a resend after a relay restart is never learned from twice, while a restarted worker
process that reuses its name (seqs from 0 again, a newer incarnation) is learned from as new.

A chunk whose arrays do not fit the trainer's spaces (a worker on another env, a buggy compressor)
is rejected, counted, and reported once per worker; training goes on with the others.
"""

from __future__ import annotations

import sys
import time
import zlib
from typing import Any, Callable

import numpy as np

from relayrl.config import RunConfig
from relayrl.errors import RelayRLError
from relayrl.net import wire
from relayrl.net.client import RelayClient
from relayrl.net.hooks import load_hook
from relayrl.net.seen import Senders
from relayrl.types import Batch

PULL_WAIT_S = 1.0  # pull() returns empty after this, so the loop can notice Ctrl-C and stop values
WAITING_NOTICE_S = 30.0


class RelaySource:
    def __init__(self, config: RunConfig, observation_space, action_space):
        net = config.net
        if net.server is None:
            raise RelayRLError("RelaySource needs net.server (relayrl train --server HOST:PORT)")
        self.server, self.connect_timeout = net.server, net.connect_timeout_s
        self.client = RelayClient(net.server, "trainer", keys=net.keys, heartbeat_s=net.heartbeat_s,
                                  timeout_s=net.timeout_s, max_message_mb=net.max_message_mb)
        self.decompress: Callable[[Batch], Batch] | None = load_hook(net.decompressor, "net.decompressor")
        self.crc_debug = net.crc_debug
        self.obs_shape = tuple(observation_space.shape)
        self.action_shape = tuple(action_space.shape)
        self.seen = Senders()  # per worker name, its newest process's seqs
        self.keys: set[str] | None = None  # the fields of the first accepted chunk; all must match
        self.version = -1
        self.env_steps = 0
        self.returns: list[float] = []
        self.lengths: list[int] = []
        self.test_returns: list[float] = []
        self.timing: dict[str, dict[str, float]] = {}  # worker -> its real-time clock statistics
        self.counts = {"duplicates": 0, "stale": 0, "rejected": 0, "chunks": 0}
        self._lags: list[int] = []
        self._reported: set[str] = set()
        self._last_sample = time.monotonic()

    # ---------------------------------------------------------------- loop interface

    def reset(self, seed: int | None) -> None:
        if not self.client.wait_connected(self.connect_timeout):
            self.client.close(timeout=0)
            raise RelayRLError(f"no answer from the relay at {self.server} within {self.connect_timeout:.0f} s: is "
                               f"`relayrl serve --bind {self.server}` running there, and does --keys hold the keys "
                               "it accepts? (net.connect_timeout_s waits longer)")

    def publish(self, weights: dict[str, Any], version: int) -> None:
        self.client.publish_weights(version, wire.weights_to_bytes(weights))
        self.version = version

    def pull(self) -> tuple[Batch, int]:
        msgs = self.client.receive(PULL_WAIT_S)
        now = time.monotonic()
        if msgs:
            self._last_sample = now
        elif now - self._last_sample > WAITING_NOTICE_S:
            print(f"relayrl: no samples from the relay at {self.server} for {now - self._last_sample:.0f} s: "
                  "are workers running (`relayrl worker --server ...`)?", file=sys.stderr, flush=True)
            self._last_sample = now
        return self._combine(msgs)

    def poll(self) -> tuple[Batch, int]:
        return self._combine(self.client.receive(0.0))

    def pop_episodes(self) -> tuple[list[float], list[int]]:
        out = (self.returns, self.lengths)
        self.returns, self.lengths = [], []
        return out

    def stats(self) -> dict[str, float]:
        lags = np.asarray(self._lags) if self._lags else np.zeros(1)
        self._lags = []
        out = {"net/lag_mean": float(lags.mean()), "net/lag_max": float(lags.max()),
               "net/workers_seen": float(len(self.seen)),
               **{f"net/{k}": float(v) for k, v in self.counts.items()},
               "net/reconnects": float(self.client.stats["reconnects"]),
               "net/bytes_in": float(self.client.stats["bytes_in"])}
        if self.timing:
            out["net/rt_late_steps"] = sum(t.get("late_steps", 0.0) for t in self.timing.values())
            out["net/rt_jitter_max"] = max(t.get("jitter", 0.0) for t in self.timing.values())
        if self.test_returns:
            out["net/test_return"] = float(np.mean(self.test_returns))
            self.test_returns = []
        return out

    def close(self) -> None:
        self.client.close()

    # ---------------------------------------------------------------- chunks

    def _combine(self, msgs: list[wire.Message]) -> tuple[Batch, int]:
        batches, steps, acks = [], 0, []
        for msg in msgs:
            acks.append(msg)
            seen = self.seen.get(msg.sender, msg.incarnation)
            if seen is None:  # from a process since replaced by a newer one of its name (the relay delivers
                self.counts["stale"] += 1  # in order, so only a second live process of one name gets here)
                continue
            if not seen.add(msg.seq):
                self.counts["duplicates"] += 1
                continue
            batch = self._check(msg)
            meta = msg.meta
            env_steps = meta.get("env_steps", 0)
            steps += env_steps if isinstance(env_steps, int) and env_steps >= 0 else 0
            self.returns.extend(float(r) for r in _numbers(meta.get("returns")))
            self.lengths.extend(int(n) for n in _numbers(meta.get("lengths")))
            self.test_returns.extend(float(r) for r in _numbers(meta.get("test_returns")))
            timing = meta.get("timing")
            if isinstance(timing, dict):  # a real-time env's clock, latest per worker
                self.timing[msg.sender] = {k: float(v) for k, v in timing.items()
                                           if k in ("late_steps", "jitter") and isinstance(v, (int, float)) and np.isfinite(v)}
            if batch is None:
                continue
            self.counts["chunks"] += 1
            self._lags.append(self.version - msg.version)
            batches.append(batch)
        if acks:
            self.client.ack(acks)
        self.env_steps += steps
        batch = {k: np.concatenate([b[k] for b in batches]) for k in batches[0]} if batches else {}
        return batch, steps

    def _check(self, msg: wire.Message) -> Batch | None:
        """The chunk's transitions, or None (rejected, reported once per worker)."""
        batch: Batch = dict(msg.arrays)
        try:
            if self.decompress is not None:
                batch = self.decompress(batch)
            if self.crc_debug:
                _check_crc(batch, msg.meta.get("crc"))
            _check_schema(batch, self.obs_shape, self.action_shape)
            if self.keys is not None and set(batch) != self.keys:
                raise KeyError(f"chunk has fields {sorted(batch)}, earlier chunks had {sorted(self.keys)}")
            self.keys = set(batch)
        except (ValueError, KeyError, TypeError) as exc:
            if self.crc_debug and isinstance(exc, CrcMismatch):
                raise RelayRLError(f"crc_debug: chunk {msg.seq} of worker {msg.sender!r}: {exc}") from None
            self.counts["rejected"] += 1
            if msg.sender not in self._reported:
                self._reported.add(msg.sender)
                print(f"relayrl: rejected a chunk from worker {msg.sender!r}: {exc} (is it running the same env, "
                      "algo and net.compressor as this trainer?)", file=sys.stderr, flush=True)
            return None
        return batch


class CrcMismatch(ValueError):
    pass


def crc_of(batch: Batch) -> dict[str, int]:
    return {k: zlib.crc32(np.ascontiguousarray(v).tobytes()) for k, v in batch.items()}


def _check_crc(batch: Batch, expected: Any) -> None:
    if not isinstance(expected, dict):
        raise CrcMismatch("the worker sent no CRCs: set net.crc_debug=true on the worker too")
    got = crc_of(batch)
    if set(got) != set(expected):
        raise CrcMismatch(f"decompressed fields {sorted(got)} differ from the originals {sorted(expected)}")
    for key, value in expected.items():
        if got[key] != value:
            raise CrcMismatch(f"field {key!r} differs from the original after decompression")


def _check_schema(batch: Batch, obs_shape: tuple, action_shape: tuple) -> None:
    required = ("obs", "action", "reward", "next_obs", "terminated")
    missing = [k for k in required if k not in batch]
    if missing:
        raise KeyError(f"chunk lacks {missing}")
    rows = len(batch["reward"])
    for key, value in batch.items():
        if value.shape[:1] != (rows,):
            raise ValueError(f"{key!r} has {value.shape[:1]} rows, reward has {rows}")
    for key, shape in (("obs", obs_shape), ("next_obs", obs_shape), ("action", action_shape)):
        if batch[key].shape[1:] != shape:
            raise ValueError(f"{key!r} rows have shape {batch[key].shape[1:]}, the trainer's env has {shape}")
    if not np.all(np.isfinite(batch["reward"])):
        raise ValueError("non-finite rewards")


def _numbers(value: Any) -> list:
    if not isinstance(value, list):
        return []
    return [v for v in value if isinstance(v, (int, float)) and not isinstance(v, bool) and np.isfinite(v)]
