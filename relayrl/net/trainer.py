"""The trainer's end of the relay: ``relayrl train ALGO --env ENV --server HOST:PORT``.

``RelaySource`` is the loop's ``samples=`` source and ``publish=`` sink (like the runtime's worker
pools): ``pull()`` returns the transitions remote workers sent, ``publish(weights, version)``
broadcasts safetensors bytes through the relay. Every chunk is acknowledged once it is taken (the
worker then forgets it); a chunk seen before, by (worker, incarnation, seq), is acknowledged and
dropped, so a resend after a relay restart is never learned from twice, while a restarted worker
process that reuses its name (seqs from 0 again, a newer incarnation) is learned from as new.

A chunk the trainer cannot use (a worker on another env or algo, a buggy compressor, a NaN reward,
a missing or invalid ``env_steps``) is *refused*: acknowledged like any other (so the worker stops
resending it) with the reason on the ack, which the relay passes to the worker (wire protocol 2.1,
an ack's ``refusals``); counted in ``net/rejected`` and ``net/rejected/<cause>``; and logged for the
first refusal of each cause from each worker, naming the worker, what was expected and what came.
It contributes nothing: no transitions, env steps or episode returns. Training goes on with the
other workers. The causes are ``CAUSES``.
"""

from __future__ import annotations

import sys
import time
import zlib
from typing import Any, Callable

import gymnasium as gym
import numpy as np

from relayrl.config import RunConfig
from relayrl.core import SampleSource
from relayrl.data.dtypes import stored_dtype
from relayrl.errors import ConfigError, EnvError, RelayRLError
from relayrl.net import wire
from relayrl.net.client import RelayClient
from relayrl.net.hooks import load_hook
from relayrl.net.seen import Senders
from relayrl.types import Batch

PULL_WAIT_S = 1.0  # pull() returns empty after this, so the loop can notice Ctrl-C and stop values
WAITING_NOTICE_S = 30.0

# The arrays of an off-policy chunk (docs/wire-protocol.md, "Samples chunks"), after net.decompressor.
FIELDS = ("obs", "action", "reward", "next_obs", "terminated", "discount")
# Why a chunk is refused: net/rejected/<cause>, and the cause the worker is told.
CAUSES = ("env_steps", "decompress", "missing", "extra", "rows", "empty", "shape", "dtype", "nonfinite")
_SAME_RUN = ("run the worker with the trainer's --env, --algo and --config/--set options (and, with a "
             "net.compressor, the one that matches the trainer's net.decompressor)")


_SENDER_BUG = ("check the worker's net.compressor (or, for a worker of your own, docs/wire-protocol.md, \"Samples "
               "chunks\")")


class Refusal(Exception):
    """A chunk the trainer will not use: ``cause`` (one of CAUSES), what is wrong, and the fix."""

    def __init__(self, cause: str, problem: str, fix: str):
        super().__init__(f"{problem}: {fix}")
        self.cause, self.problem, self.fix = cause, problem, fix


class RelaySource(SampleSource):
    can_poll = True

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
        # what a relayrl worker on this env sends: observations in their stored dtype (data/dtypes.py:
        # float64 as float32, integers kept; earlier releases sent the env's own dtype, which replay
        # converts just as well), actions as the policies emit them (integers for discrete spaces,
        # float32 otherwise; SAC's are scaled to [-1, 1])
        obs_dtypes = _obs_dtypes(getattr(observation_space, "dtype", None))
        action_dtype = np.dtype(np.int64 if isinstance(action_space, (gym.spaces.Discrete, gym.spaces.MultiDiscrete,
                                                                       gym.spaces.MultiBinary)) else np.float32)
        self.schema: dict[str, tuple[tuple, tuple[np.dtype, ...]]] = {
            "obs": (self.obs_shape, obs_dtypes), "next_obs": (self.obs_shape, obs_dtypes),
            "action": (self.action_shape, (action_dtype,)), "reward": ((), (np.dtype(np.float32),)),
            "terminated": ((), (np.dtype(bool),)), "discount": ((), (np.dtype(np.float32),))}
        self.env_name = f"{config.env.id}, {config.algo}"
        self.decompressor = net.decompressor
        self.seen = Senders()  # per worker name, its newest process's seqs
        self.version = -1
        self.env_steps = 0
        self.returns: list[float] = []
        self.lengths: list[int] = []
        self.test_returns: list[float] = []
        self.timing: dict[str, dict[str, float]] = {}  # worker -> its real-time clock statistics
        self.max_lag = config.max_policy_lag  # older chunks count their env steps but are not learned from
        self.counts = {"duplicates": 0, "stale": 0, "rejected": 0, "chunks": 0, "too_old": 0}
        self.rejected: dict[str, int] = {}  # cause -> chunks refused for it
        self._lags: list[int] = []
        self._reported: set[tuple[str, str]] = set()  # (worker, cause) already logged
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
               **{f"net/rejected/{cause}": float(n) for cause, n in self.rejected.items()},
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
        batches, steps, acks, refusals = [], 0, [], []
        for msg in msgs:
            acks.append(msg)
            seen = self.seen.get(msg.sender, msg.incarnation)
            if seen is None:  # from a process since replaced by a newer one of its name (the relay delivers
                self.counts["stale"] += 1  # in order, so only a second live process of one name gets here)
                continue
            if not seen.add(msg.seq):
                self.counts["duplicates"] += 1
                continue
            try:
                batch = self._check(msg)
            except Refusal as refusal:
                self._refuse(msg, refusal)
                refusals.append((msg, refusal.cause, f"the trainer refused it: {refusal}"))
                continue
            meta = msg.meta
            steps += meta["env_steps"]
            self.returns.extend(float(r) for r in _numbers(meta.get("returns")))
            self.lengths.extend(int(n) for n in _numbers(meta.get("lengths")))
            self.test_returns.extend(float(r) for r in _numbers(meta.get("test_returns")))
            timing = meta.get("timing")
            if isinstance(timing, dict):  # a real-time env's clock, latest per worker
                self.timing[msg.sender] = {k: float(v) for k, v in timing.items()
                                           if k in ("late_steps", "jitter") and isinstance(v, (int, float)) and np.isfinite(v)}
            self.counts["chunks"] += 1
            lag = self.version - msg.version
            self._lags.append(lag)
            if self.max_lag is not None and lag > self.max_lag:
                self.counts["too_old"] += 1  # (as on the mp and Ray backends: max_policy_lag)
                continue
            if batch:
                batches.append(batch)
        if acks:
            self.client.ack(acks, refusals)
        self.env_steps += steps
        batch = {k: np.concatenate([b[k] for b in batches]) for k in batches[0]} if batches else {}
        return batch, steps

    def _refuse(self, msg: wire.Message, refusal: Refusal) -> None:
        """Count a refused chunk; log the first of each cause from each worker."""
        self.counts["rejected"] += 1
        self.rejected[refusal.cause] = self.rejected.get(refusal.cause, 0) + 1
        if (msg.sender, refusal.cause) not in self._reported:
            self._reported.add((msg.sender, refusal.cause))
            print(f"relayrl: refused chunk {msg.seq} of worker {msg.sender!r} ({refusal.cause}): {refusal.problem}; "
                  f"{refusal.fix}. The worker was told; later refusals of this kind from it are only counted "
                  f"(net/rejected/{refusal.cause})", file=sys.stderr, flush=True)

    def _check(self, msg: wire.Message) -> Batch:
        """The chunk's transitions ({} for a chunk that carries only env steps), or Refusal."""
        problem = wire.env_steps_problem(msg.meta)
        if problem is not None:
            raise Refusal("env_steps", problem, "every chunk counts the env steps its transitions took in "
                          "meta.env_steps, an integer >= 0: run a relayrl worker of the trainer's release")
        batch: Batch = dict(msg.arrays)
        if not batch:  # env steps that completed no transition yet (n-step), or only episode ends
            return batch
        if self.decompress is not None:
            try:
                batch = self.decompress(batch)
            except Exception as exc:  # a user's hook: any error means this chunk is not what it expects
                raise Refusal("decompress", f"net.decompressor {self.decompressor} failed on it "
                              f"({type(exc).__name__}: {exc})", _SAME_RUN) from None
            if not isinstance(batch, dict) or not all(isinstance(v, np.ndarray) for v in batch.values()):
                raise Refusal("decompress", f"net.decompressor {self.decompressor} returned "
                              f"{type(batch).__name__}, not a dict of numpy arrays", "fix the decompressor")
        if self.crc_debug:
            try:
                _check_crc(batch, msg.meta.get("crc"))
            except CrcMismatch as exc:
                raise RelayRLError(f"crc_debug: chunk {msg.seq} of worker {msg.sender!r}: {exc}") from None
        _check_schema(batch, self.schema, self.env_name)
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


def _obs_dtypes(space_dtype: Any) -> tuple[np.dtype, ...]:
    """The observation dtypes a relayrl worker sends for a space of ``space_dtype``: the stored one
    first (what this release sends), then the space's own (earlier releases); () for no check."""
    if space_dtype is None:
        return ()
    space_dtype = np.dtype(space_dtype)
    try:
        stored = stored_dtype(space_dtype)
    except EnvError:  # a dtype no algorithm learns from: the trainer's algorithm refuses the env itself
        return (space_dtype,)
    return (stored,) if stored == space_dtype else (stored, space_dtype)


def _check_schema(batch: Batch, schema: dict[str, tuple[tuple, tuple[np.dtype, ...]]], env: str) -> None:
    """Raise Refusal unless ``batch`` holds exactly the arrays of ``schema``, each with one row per
    transition (at least one), rows of the expected shape and the expected dtype, finite rewards
    and discounts."""
    missing = [k for k in schema if k not in batch]
    if missing:
        raise Refusal("missing", f"it lacks {missing} (it has {sorted(batch)}; the trainer expects {list(schema)})",
                      _SAME_RUN)
    extra = sorted(k for k in batch if k not in schema)
    if extra:
        raise Refusal("extra", f"it carries {extra}, which the trainer does not know (it expects exactly "
                      f"{list(schema)})", _SAME_RUN)
    rows = {k: (v.shape[0] if v.ndim else None) for k, v in batch.items()}
    if len(set(rows.values())) != 1 or None in rows.values():
        raise Refusal("rows", f"its arrays hold different numbers of rows ({', '.join(f'{k} {n}' for k, n in rows.items())}; "
                      "one row per transition in every array)", _SENDER_BUG)
    if batch["reward"].shape[0] == 0:
        raise Refusal("empty", "its arrays hold 0 rows (a chunk with no transitions carries no arrays, only "
                      "meta.env_steps)", _SENDER_BUG)
    for key, (shape, _) in schema.items():
        got = batch[key].shape[1:]
        if got != shape:
            what = (f"observation width {got[0]}, expected {shape[0]}" if key == "obs" and len(got) == len(shape) == 1
                    else f"{key} rows have shape {got}, expected {shape}")
            raise Refusal("shape", f"{what} ({env})", _SAME_RUN)
    for key, (shape, dtypes) in schema.items():
        if dtypes and batch[key].dtype not in dtypes:
            expected = " or ".join(str(d) for d in dtypes)
            raise Refusal("dtype", f"{key} has dtype {batch[key].dtype}, expected {expected} ({env})", _SAME_RUN)
    for key in ("reward", "discount"):
        bad = int(np.count_nonzero(~np.isfinite(batch[key])))
        if bad:
            raise Refusal("nonfinite", f"{bad} of its {len(batch[key])} {key} values are not finite (nan or inf)",
                          "fix the worker's env (or wrap it to replace non-finite rewards)")


def _numbers(value: Any) -> list:
    if not isinstance(value, list):
        return []
    return [v for v in value if isinstance(v, (int, float)) and not isinstance(v, bool) and np.isfinite(v)]


def make_relay_source(config: RunConfig) -> tuple[RelaySource, tuple[Any, Any] | None]:
    """The trainer's end of a relay (``--server``): remote workers instead of local ones. Returns the
    source and, when the trainer does not build the env, the spaces the workers reported (else None:
    the trainer's own evaluation envs give them)."""
    from relayrl.algos import get_algo
    from relayrl.envs.registry import make

    if get_algo(config.algo).on_policy:
        raise ConfigError(f"{config.algo} learns from rollouts of the weights it just published, which remote "
                          "workers through a relay cannot promise: train sac or dqn with --server")
    if config.workers != 1 or config.backend not in ("auto", "inline"):
        raise ConfigError("--server learns from the workers connected to the relay: drop --workers/--backend "
                          "(start `relayrl worker --server ...` on each machine instead)")
    env = make(config.env.id, **config.env.kwargs)
    try:
        return RelaySource(config, env.observation_space, env.action_space), None
    finally:
        env.close()
