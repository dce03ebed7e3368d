"""The trainer's end of the relay: ``relayrl train ALGO --env ENV --server HOST:PORT``.

``RelaySource`` is the loop's ``samples=`` source and ``publish=`` sink (like the runtime's worker
pools): ``publish(weights, version)`` broadcasts safetensors bytes through the relay, and ``pull()``
returns what remote workers sent. Every chunk is acknowledged once it is taken (the worker then
forgets it); a chunk seen before, by (worker, incarnation, seq), is acknowledged and dropped, so a
resend after a relay restart is never learned from twice, while a restarted worker process that
reuses its name (seqs from 0 again, a newer incarnation) is learned from as new.

Off-policy (SAC, DQN): ``pull()`` returns the transitions that have arrived (empty after
``PULL_WAIT_S``, so the loop can notice Ctrl-C). Chunks more than ``max_policy_lag`` versions old
count their env steps and are not learned from (``net/too_old``).

On-policy, each chunk is one worker's [T, n] rollout (T = ``num_steps``, n = ``env.num_envs``) and
``pull()`` waits inside until it can return a whole rollout, as the runtime's pools do
(runtime/pool.py). PPO (synchronous): the rollout of the version just published from
``config.workers`` distinct workers, joined along the env axis in worker-name order; chunks of any
other version are acknowledged and dropped (``net/other_version``: normal, the worker is not told),
and a second chunk of the version from one worker, or one beyond the ``config.workers`` needed, is
dropped too (``net/surplus``). APPO: whatever rollouts within ``max_policy_lag`` have arrived (at
least one), each worker's env columns at a slot given by its first appearance modulo
``config.workers``. Either way the rollout carries ``column`` ([T, N]: slot * num_envs + k), and the
workers' observation moments (``meta.obs_moments``) are merged for ``pop_observation_moments()``.

Workers describe their env's spaces in every chunk (``meta.spaces``, net/spaces.py). With
``net.remote_env`` the trainer builds no env: ``await_spaces()`` takes the spaces from the first
chunk that carries them (that chunk, and those before it, are kept and used).

A chunk the trainer cannot use (a worker on another env or algo, a buggy compressor, a NaN reward,
a missing or invalid ``env_steps``, bad observation moments, other spaces) is *refused*:
acknowledged like any other (so the worker stops resending it) with the reason on the ack, which the
relay passes to the worker (wire protocol 2.1, an ack's ``refusals``); counted in ``net/rejected``
and ``net/rejected/<cause>``; and logged for the first refusal of each cause from each worker,
naming the worker, what was expected and what came. It contributes nothing: no samples, env steps
or episode returns. Training goes on with the other workers. The causes are ``CAUSES``.
"""

from __future__ import annotations

import sys
import threading
import time
import zlib
from typing import Any, Callable

import gymnasium as gym
import numpy as np

from relayrl.algos import get_algo
from relayrl.core import SampleSource
from relayrl.data.dtypes import stored_dtype
from relayrl.envs.masks import mask_width
from relayrl.errors import ConfigError, EnvError, RelayRLError
from relayrl.net import wire
from relayrl.net.client import RelayClient
from relayrl.net.hooks import load_hook
from relayrl.net.seen import Senders
from relayrl.net.spaces import SpaceDataError, space_from_data
from relayrl.options import RunConfig
from relayrl.policy.normalizer import RunningMeanStd
from relayrl.types import COLUMN, Batch

PULL_WAIT_S = 1.0  # off-policy pull() returns empty after this, so the loop can notice Ctrl-C and stop values
WAITING_NOTICE_S = 30.0
NOTICE_S = 1.0  # a wait for the relay, or for the first chunk, is said after this long
STOP_CHECK_S = 0.2  # waits look at the stop event this often

# The arrays of an off-policy chunk (docs/wire-protocol.md, "Samples chunks"), after net.decompressor.
FIELDS = ("obs", "action", "reward", "next_obs", "terminated", "discount")
# The arrays of an on-policy chunk (a RolloutStore's, data/rollout.py), "hidden" only for recurrent policies.
ROLLOUT_FIELDS = ("obs", "action", "logp", "value", "reward", "terminated", "truncated", "next_value")
ROLLOUT_FINITE = ("logp", "value", "reward", "next_value")
# Why a chunk is refused: net/rejected/<cause>, and the cause the worker is told.
CAUSES = ("env_steps", "decompress", "missing", "extra", "rows", "empty", "shape", "dtype", "nonfinite", "moments",
          "spaces")
_SAME_RUN = ("run the worker with the trainer's --env, --algo and --config/--set options (and, with a "
             "net.compressor, the one that matches the trainer's net.decompressor)")


_SENDER_BUG = ("check the worker's net.compressor (or, for a worker of your own, docs/wire-protocol.md, \"Samples "
               "chunks\")")

Schema = dict[str, tuple[tuple, tuple[np.dtype, ...]]]


class Refusal(Exception):
    """A chunk the trainer will not use: ``cause`` (one of CAUSES), what is wrong, and the fix."""

    def __init__(self, cause: str, problem: str, fix: str):
        super().__init__(f"{problem}: {fix}")
        self.cause, self.problem, self.fix = cause, problem, fix


class RelaySource(SampleSource):
    """``observation_space``/``action_space``: the env's (None with ``net.remote_env`` until
    ``await_spaces()`` has them from a worker). ``stop``: set by the first Ctrl-C (``relayrl
    train``); a wait on the relay or the workers then ends within STOP_CHECK_S with KeyboardInterrupt."""

    can_poll = True

    def __init__(self, config: RunConfig, observation_space: gym.Space | None = None,
                 action_space: gym.Space | None = None, stop: threading.Event | None = None):
        net = config.net
        if net.server is None:
            raise RelayRLError("RelaySource needs net.server (relayrl train --server HOST:PORT)")
        if (observation_space is None) != (action_space is None):
            raise RelayRLError("RelaySource takes both spaces, or neither (net.remote_env: from the workers)")
        if observation_space is None and not net.remote_env:
            raise RelayRLError("RelaySource needs the env's spaces, or net.remote_env=true to take them from the "
                               "workers")
        entry = get_algo(config.algo)
        self.config = config
        self.on_policy, self.synchronous = entry.on_policy, entry.collect_on_request
        self.workers = config.workers  # on-policy: the rollouts (PPO) or column slots (APPO) of one learner rollout
        self.num_envs = config.env.num_envs
        self.num_steps = config.algo_config.num_steps if self.on_policy else 0
        self.server, self.connect_timeout = net.server, net.connect_timeout_s
        self.stop = stop
        self._chunks_seen = False  # any chunk has come (the first wait for one is said sooner)
        self._lost_told = False  # the lost connection to the relay was said
        self.client = RelayClient(net.server, "trainer", keys=net.keys, heartbeat_s=net.heartbeat_s,
                                  timeout_s=net.timeout_s, max_message_mb=net.max_message_mb)
        self.decompress: Callable[[Batch], Batch] | None = load_hook(net.decompressor, "net.decompressor")
        self.crc_debug = net.crc_debug
        self.env_name = f"{config.env.id}, {config.algo}"
        self.decompressor = net.decompressor
        self.seen = Senders()  # per worker name, its newest process's seqs
        self.version = -1
        self.env_steps = 0
        self.returns: list[float] = []
        self.lengths: list[int] = []
        self.test_returns: list[float] = []  # since the last stats() (net/test_return)
        self._test_pending: list[float] = []  # since the last pop_test_returns()
        self.timing: dict[str, dict[str, float]] = {}  # worker -> its real-time clock statistics
        self.max_lag = config.max_policy_lag  # older chunks count their env steps but are not learned from
        self.counts = {"duplicates": 0, "stale": 0, "rejected": 0, "chunks": 0, "too_old": 0}
        if self.on_policy:
            self.counts.update(other_version=0, surplus=0)
        self.rejected: dict[str, int] = {}  # cause -> chunks refused for it
        self._lags: list[int] = []
        self._reported: set[tuple[str, str]] = set()  # (worker, cause) already logged
        self._last_sample = time.monotonic()
        self._stash: list[wire.Message] = []  # chunks received while waiting for the spaces, not yet taken
        self._spaces_ok: dict[str, Any] = {}  # worker -> the meta.spaces it last sent that matched (checked once)
        self._moments: RunningMeanStd | None = None  # the observations behind the chunks taken since the last pop
        self._rollouts: dict[str, tuple[wire.Message, Batch]] = {}  # PPO: this version's rollout per worker
        self._ready: list[tuple[wire.Message, Batch]] = []  # APPO: rollouts to learn from, in arrival order
        self._ready_steps = 0  # APPO: env steps of the chunks taken since the last pull
        self._slots: dict[str, int] = {}  # APPO: worker -> its column slot
        self.observation_space: gym.Space | None = None
        self.action_space: gym.Space | None = None
        self.normalises = False  # the trainer's policy keeps observation statistics (ppo.obs_norm)
        self.optional: Schema = {}  # arrays a chunk may carry (action masks), set with the spaces
        if observation_space is not None:
            self._bind(observation_space, action_space)

    def _bind(self, observation_space: gym.Space, action_space: gym.Space) -> None:
        """What the chunks must look like, from the env's spaces (and, on-policy, the policy's attributes)."""
        self.observation_space, self.action_space = observation_space, action_space
        self.obs_shape = tuple(observation_space.shape or ())
        self.action_shape = tuple(action_space.shape or ())
        # a masked env's chunks also carry its action masks (envs/masks.py): the masks acted under
        # (on-policy) or those of the next observations (off-policy, DQN's target max)
        width = mask_width(action_space)
        self.optional: Schema = {("action_mask" if self.on_policy else "next_action_mask"):
                                 ((width,), (np.dtype(bool),))} if width else {}
        if self.on_policy:
            self.schema = self._rollout_schema()
            return
        # what a relayrl worker on this env sends: observations in their stored dtype (data/dtypes.py:
        # float64 as float32, integers kept; earlier releases sent the env's own dtype, which replay
        # converts just as well), actions as the policies emit them (integers for discrete spaces,
        # float32 otherwise; SAC's are scaled to [-1, 1])
        obs_dtypes = _obs_dtypes(getattr(observation_space, "dtype", None))
        action_dtype = np.dtype(np.int64 if isinstance(action_space, (gym.spaces.Discrete, gym.spaces.MultiDiscrete,
                                                                       gym.spaces.MultiBinary)) else np.float32)
        self.schema = {
            "obs": (self.obs_shape, obs_dtypes), "next_obs": (self.obs_shape, obs_dtypes),
            "action": (self.action_shape, (action_dtype,)), "reward": ((), (np.dtype(np.float32),)),
            "terminated": ((), (np.dtype(bool),)), "discount": ((), (np.dtype(np.float32),))}

    def _rollout_schema(self) -> Schema:
        """A RolloutStore's arrays for the trainer's policy (data/rollout.py): per [T, n] step, the trailing
        shape and dtype."""
        entry = get_algo(self.config.algo)
        policy = entry.build_policy(self.config.algo_config, self.observation_space, self.action_space)
        self.normalises = policy.obs_rms is not None
        f4, b1 = (np.dtype(np.float32),), (np.dtype(bool),)
        schema: Schema = {
            "obs": (self.obs_shape, (stored_dtype(policy.obs_dtype),)),
            "action": (tuple(policy.action_shape), (np.dtype(policy.action_dtype),)),
            "logp": ((), f4), "value": ((), f4), "reward": ((), f4), "terminated": ((), b1), "truncated": ((), b1),
            "next_value": ((), f4)}
        if policy.recurrent:
            schema["hidden"] = ((policy.state_size,), f4)
        return schema

    # ---------------------------------------------------------------- loop interface

    def connect(self) -> None:
        """Wait for the relay (``net.connect_timeout_s``), saying so after NOTICE_S; a RelayRLError naming
        the fix if it does not answer."""
        started = time.monotonic()
        told = False
        while not self.client.wait_connected(STOP_CHECK_S):
            self._check_stop()
            waited = time.monotonic() - started
            if waited >= self.connect_timeout:
                self.client.close(timeout=0)
                raise RelayRLError(f"no answer from the relay at {self.server} within {self.connect_timeout:.0f} s: "
                                   f"is `relayrl serve --bind {self.server}` running there, of this relayrl release "
                                   f"(wire protocol {wire.PROTOCOL}; a relay of protocol 2 does not answer newer "
                                   "clients), and does --keys hold the keys it accepts? (net.connect_timeout_s waits "
                                   "longer)")
            if not told and waited >= NOTICE_S:
                print(f"relayrl: waiting for the relay at {self.server} (up to {self.connect_timeout:.0f} s, "
                      "net.connect_timeout_s)", file=sys.stderr, flush=True)
                told = True
        if told:
            print(f"relayrl: connected to the relay at {self.server}", file=sys.stderr, flush=True)

    def _check_stop(self) -> None:
        """Ctrl-C (the stop event) ends a wait on a peer at once: no round to finish while nothing comes."""
        if self.stop is not None and self.stop.is_set():
            raise KeyboardInterrupt

    def await_spaces(self, timeout: float | None = None) -> tuple[gym.Space, gym.Space]:
        """The env's spaces, from the first chunk that describes them (net.remote_env). Every chunk
        received meanwhile is kept for ``pull()``."""
        if self.observation_space is not None:
            return self.observation_space, self.action_space
        self.connect()
        timeout = self.connect_timeout if timeout is None else timeout
        started = time.monotonic()
        told = False
        while time.monotonic() < started + timeout:
            msgs = self.client.receive(min(STOP_CHECK_S, max(0.0, started + timeout - time.monotonic())))
            if not msgs and self.client.closed:
                break
            self._check_stop()
            if not msgs and not told and time.monotonic() - started >= NOTICE_S:
                print(f"relayrl: waiting for a worker to describe its env's spaces through the relay at {self.server} "
                      f"(net.remote_env; up to {timeout:.0f} s)", file=sys.stderr, flush=True)
                told = True
            self._stash.extend(msgs)
            for msg in msgs:
                spaces = _decode_spaces(msg.meta.get("spaces"))
                if isinstance(spaces, tuple):
                    print(f"relayrl: the env's spaces, from worker {msg.sender!r}: observation {spaces[0]}, action "
                          f"{spaces[1]}", file=sys.stderr, flush=True)
                    self._bind(*spaces)
                    return spaces
        raise RelayRLError(f"net.remote_env: no worker described its env's spaces through the relay at {self.server} "
                           f"within {timeout:.0f} s: start `relayrl worker --server {self.server} --env ENV --algo "
                           f"{self.config.algo}` (workers of this release describe them in every chunk), or drop "
                           "--remote-env so the trainer builds the env itself (net.connect_timeout_s waits longer)")

    def reset(self, seed: int | None) -> None:
        self.connect()
        if self.observation_space is None:
            self.await_spaces()

    def publish(self, weights: dict[str, Any], version: int) -> None:
        self.client.publish_weights(version, wire.weights_to_bytes(weights))
        self.version = version
        if self._rollouts:  # (PPO) chunks of the version before: they can no longer be used
            self.counts["other_version"] += len(self._rollouts)
            self._rollouts = {}

    def pull(self) -> tuple[Batch, int]:
        if self.on_policy:
            return self._pull_rollout()
        msgs = self._receive(PULL_WAIT_S)
        self._notice(bool(msgs), "no samples")
        return self._combine(msgs)

    def poll(self) -> tuple[Batch, int]:
        if self.on_policy:  # (a rollout is what pull() waits for)
            return {}, 0
        return self._combine(self._receive(0.0))

    def pop_episodes(self) -> tuple[list[float], list[int]]:
        out = (self.returns, self.lengths)
        self.returns, self.lengths = [], []
        return out

    def pop_observation_moments(self) -> dict[str, np.ndarray] | None:
        moments, self._moments = self._moments, None
        return None if moments is None else moments.state_dict()

    def pop_test_returns(self) -> list[float]:
        """Returns of the workers' deterministic test episodes (net.test_episode_interval) since the last call."""
        out, self._test_pending = self._test_pending, []
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

    # ---------------------------------------------------------------- receiving

    def _receive(self, timeout: float) -> list[wire.Message]:
        if self._stash:  # what await_spaces() received first
            msgs, self._stash = self._stash, []
            return msgs
        return self.client.receive(timeout)

    def _notice(self, received: bool, what: str) -> None:
        """Say on stderr what the trainer waits for: the relay, once its connection is lost (and when it
        is back); the workers' first chunk after NOTICE_S; then ``what`` every WAITING_NOTICE_S
        without a chunk."""
        now = time.monotonic()
        connected = self.client.connected.is_set()
        if connected == self._lost_told:
            self._lost_told = not connected
            print(f"relayrl: lost the relay at {self.server}; waiting for the relay at {self.server} (reconnecting)"
                  if not connected else f"relayrl: connected to the relay at {self.server} again",
                  file=sys.stderr, flush=True)
        if received:
            self._last_sample, self._chunks_seen = now, True
        elif not self._chunks_seen and connected and now - self._last_sample > NOTICE_S:
            print(f"relayrl: waiting for workers: none has sent anything through the relay at {self.server} yet "
                  f"(`relayrl worker --server {self.server} --env {self.config.env.id} --algo {self.config.algo}`)",
                  file=sys.stderr, flush=True)
            self._last_sample, self._chunks_seen = now, True  # (then every WAITING_NOTICE_S)
        elif now - self._last_sample > WAITING_NOTICE_S:
            print(f"relayrl: {what} from the relay at {self.server} for {now - self._last_sample:.0f} s: are workers "
                  f"running (`relayrl worker --server {self.server} --algo {self.config.algo} ...`)?",
                  file=sys.stderr, flush=True)
            self._last_sample = now

    def _admit(self, msg: wire.Message, refusals: list) -> Batch | None:
        """The chunk's arrays, or None for a duplicate, a stale or a refused chunk (counted; a refusal
        is added to ``refusals`` for the ack). Test returns and timing are taken from every admitted chunk."""
        seen = self.seen.get(msg.sender, msg.incarnation)
        if seen is None:  # from a process since replaced by a newer one of its name (the relay delivers
            self.counts["stale"] += 1  # in order, so only a second live process of one name gets here)
            return None
        if not seen.add(msg.seq):
            self.counts["duplicates"] += 1
            return None
        try:
            batch = self._check(msg)
        except Refusal as refusal:
            self._refuse(msg, refusal)
            refusals.append((msg, refusal.cause, f"the trainer refused it: {refusal}"))
            return None
        meta = msg.meta
        tests = [float(r) for r in _numbers(meta.get("test_returns"))]
        self.test_returns.extend(tests)
        self._test_pending.extend(tests)
        timing = meta.get("timing")
        if isinstance(timing, dict):  # a real-time env's clock, latest per worker
            self.timing[msg.sender] = {k: float(v) for k, v in timing.items()
                                       if k in ("late_steps", "jitter") and isinstance(v, (int, float)) and np.isfinite(v)}
        return batch

    def _accept(self, msg: wire.Message) -> int:
        """Count a chunk that is learned from (or too old to be): its env steps, episodes, observations."""
        meta = msg.meta
        self.returns.extend(float(r) for r in _numbers(meta.get("returns")))
        self.lengths.extend(int(n) for n in _numbers(meta.get("lengths")))
        moments = meta.get("obs_moments")
        if moments is not None:  # (checked by _check)
            if self._moments is None:
                self._moments = RunningMeanStd(self.obs_shape)
            self._moments.merge_state(moments)
        self.counts["chunks"] += 1
        self._lags.append(self.version - msg.version)
        self.env_steps += meta["env_steps"]
        return meta["env_steps"]

    def _combine(self, msgs: list[wire.Message]) -> tuple[Batch, int]:
        """Off-policy: the transitions of ``msgs`` within max_policy_lag, and the env steps of all taken."""
        batches, steps, refusals = [], 0, []
        for msg in msgs:
            batch = self._admit(msg, refusals)
            if batch is None or (not batch and msg.version < 0):  # (a worker's announcement: only its spaces)
                continue
            steps += self._accept(msg)
            if self.max_lag is not None and self.version - msg.version > self.max_lag:
                self.counts["too_old"] += 1  # (as on the mp and Ray backends: max_policy_lag)
                continue
            if batch:
                batches.append(batch)
        if msgs:
            self.client.ack(msgs, refusals)
        batches = _all_masked(batches, self.optional, 1)
        batch = {k: np.concatenate([b[k] for b in batches]) for k in batches[0]} if batches else {}
        return batch, steps

    # ---------------------------------------------------------------- on-policy

    def _pull_rollout(self) -> tuple[Batch, int]:
        while True:
            rollout = self._rollout_ready()
            if rollout is not None:
                return rollout
            msgs = self._receive(STOP_CHECK_S)
            if not msgs and self.client.closed:
                raise RelayRLError(f"the connection to the relay at {self.server} was closed while the trainer "
                                   "waited for rollouts")
            self._check_stop()
            self._take(msgs)
            self._notice(bool(msgs), self._waiting_for())

    def _waiting_for(self) -> str:
        if self.synchronous:
            have = f" ({', '.join(sorted(self._rollouts))})" if self._rollouts else ""
            return (f"{len(self._rollouts)} of the {self.workers} rollouts of policy version {self.version} "
                    f"(--workers {self.workers}) came{have}, nothing more")
        return "no rollouts" + (f" within max_policy_lag {self.max_lag}" if self.max_lag is not None else "")

    def _take(self, msgs: list[wire.Message]) -> None:
        """File each usable rollout: PPO's of the current version by worker, APPO's within the lag limit."""
        refusals: list = []
        for msg in msgs:
            batch = self._admit(msg, refusals)
            if not batch:  # a duplicate, a refusal, or a worker's announcement (its spaces, no rollout yet)
                continue
            lag = self.version - msg.version
            if lag < 0 or (self.synchronous and lag != 0):  # (lag < 0: a previous trainer's weights, saved by
                self.counts["other_version"] += 1           # the worker; it gets this trainer's next)
                continue
            if self.synchronous:
                if msg.sender in self._rollouts or len(self._rollouts) >= self.workers:
                    self.counts["surplus"] += 1  # e.g. a worker that collected again when no new weights came
                    continue
                self._rollouts[msg.sender] = (msg, batch)
                continue
            self._ready_steps += self._accept(msg)
            if self.max_lag is not None and lag > self.max_lag:
                self.counts["too_old"] += 1
                continue
            self._ready.append((msg, batch))
        if msgs:
            self.client.ack(msgs, refusals)

    def _rollout_ready(self) -> tuple[Batch, int] | None:
        if self.synchronous:
            if len(self._rollouts) < self.workers:
                return None
            names = sorted(self._rollouts)
            parts = [(slot, self._rollouts[name]) for slot, name in enumerate(names)]
            self._rollouts = {}
            steps = sum(self._accept(msg) for _, (msg, _) in parts)
            return self._join([(slot, batch) for slot, (_, batch) in parts]), steps
        if not self._ready:
            return None
        parts = []
        for msg, batch in self._ready:
            slot = self._slots.setdefault(msg.sender, len(self._slots) % self.workers)
            parts.append((slot, batch))
        steps, self._ready, self._ready_steps = self._ready_steps, [], 0
        return self._join(parts), steps

    def _join(self, parts: list[tuple[int, Batch]]) -> Batch:
        """[T, n] rollouts joined along the env axis, each tagged with its env columns (runtime/pool.py)."""
        tagged = []
        parts = list(zip([slot for slot, _ in parts], _all_masked([batch for _, batch in parts], self.optional, 2)))
        for slot, batch in parts:
            steps, width = batch["reward"].shape
            column = np.broadcast_to(slot * width + np.arange(width), (steps, width))
            tagged.append({**batch, COLUMN: column})
        return {k: np.concatenate([p[k] for p in tagged], axis=1) for k in tagged[0]}

    # ---------------------------------------------------------------- checks

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
        """The chunk's arrays ({} for a chunk that carries only env steps), or Refusal."""
        meta = msg.meta
        problem = wire.env_steps_problem(meta)
        if problem is not None:
            raise Refusal("env_steps", problem, "every chunk counts the env steps its transitions took in "
                          "meta.env_steps, an integer >= 0: run a relayrl worker of the trainer's release")
        batch: Batch = dict(msg.arrays)
        if not batch:  # env steps that completed no transition yet (n-step), only episode ends, or (on-policy)
            if self.on_policy and meta["env_steps"]:  # a worker announcing its spaces before its first rollout
                raise Refusal("empty", f"it has no arrays and meta.env_steps {meta['env_steps']} (an on-policy chunk "
                              "carries its whole rollout)", _SENDER_BUG)
            self._check_spaces(msg)
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
                _check_crc(batch, meta.get("crc"))
            except CrcMismatch as exc:
                raise RelayRLError(f"crc_debug: chunk {msg.seq} of worker {msg.sender!r}: {exc}") from None
        schema = {**self.schema, **{key: entry for key, entry in self.optional.items() if key in batch}}
        if self.on_policy:
            _check_rollout(batch, schema, (self.num_steps, self.num_envs), meta["env_steps"], self.env_name,
                           self.config.algo)
        else:
            _check_schema(batch, schema, self.env_name)
        self._check_spaces(msg)
        self._check_moments(meta)
        return batch

    def _check_spaces(self, msg: wire.Message) -> None:
        """A chunk that describes its env's spaces (meta.spaces) must describe the trainer's."""
        data = msg.meta.get("spaces")
        if data is None or self._spaces_ok.get(msg.sender) == data:
            return
        spaces = _decode_spaces(data)
        if isinstance(spaces, str):
            raise Refusal("spaces", f"its meta.spaces does not describe spaces ({spaces})",
                          "run a relayrl worker of the trainer's release (docs/wire-protocol.md, \"Spaces\")")
        if spaces != (self.observation_space, self.action_space):
            raise Refusal("spaces", f"its env's spaces are observation {spaces[0]}, action {spaces[1]}; the trainer's "
                          f"are observation {self.observation_space}, action {self.action_space} ({self.env_name})",
                          _SAME_RUN)
        self._spaces_ok[msg.sender] = data

    def _check_moments(self, meta: dict) -> None:
        """meta.obs_moments: present exactly when the trainer normalises observations, and sound."""
        moments = meta.get("obs_moments")
        section = self.config.algo.rpartition(":")[2]  # (its config section)
        option = f"{section}.obs_norm" if "obs_norm" in type(self.config.algo_config).model_fields else None
        if moments is None:
            if self.normalises:
                raise Refusal("moments", f"the trainer normalises observations ({option}=true) and the chunk "
                              "carries no meta.obs_moments (the worker acts on raw observations)",
                              f"run the worker with {option}=true, as the trainer")
            return
        if not self.normalises:
            raise Refusal("moments", "it carries meta.obs_moments (the worker normalises observations) and the "
                          f"trainer's {self.config.algo} policy does not" + (f" ({option}=false)" if option else ""),
                          f"run the worker with the trainer's {option}" if option else _SAME_RUN)
        problem = _moments_problem(moments, self.obs_shape)
        if problem is not None:
            raise Refusal("moments", f"its meta.obs_moments {problem}", "run a relayrl worker of the trainer's "
                          "release (or, for a worker of your own, docs/wire-protocol.md, \"Observation moments\")")


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


def _all_masked(batches: list[Batch], optional: Schema, lead: int) -> list[Batch]:
    """``batches``, where one carries an optional mask column and another does not (a worker whose env gave
    no mask), with all-True rows for the latter (every action allowed), so the columns concatenate."""
    for key, (shape, _) in optional.items():
        if any(key in b for b in batches) and not all(key in b for b in batches):
            batches = [b if key in b else {**b, key: np.ones((*b["reward"].shape[:lead], *shape), bool)}
                       for b in batches]
    return batches


def _check_keys(batch: Batch, schema: Schema) -> None:
    missing = [k for k in schema if k not in batch]
    if missing:
        raise Refusal("missing", f"it lacks {missing} (it has {sorted(batch)}; the trainer expects {list(schema)})",
                      _SAME_RUN)
    extra = sorted(k for k in batch if k not in schema)
    if extra:
        raise Refusal("extra", f"it carries {extra}, which the trainer does not know (it expects exactly "
                      f"{list(schema)})", _SAME_RUN)


def _check_rows(batch: Batch, schema: Schema, lead: int, env: str) -> None:
    """Each array's shape after its ``lead`` leading axes, and its dtype, as ``schema`` says."""
    for key, (shape, _) in schema.items():
        got = batch[key].shape[lead:]
        if got != shape:
            what = (f"observation width {got[0]}, expected {shape[0]}" if key == "obs" and len(got) == len(shape) == 1
                    else f"{key} rows have shape {got}, expected {shape}")
            raise Refusal("shape", f"{what} ({env})", _SAME_RUN)
    for key, (shape, dtypes) in schema.items():
        if dtypes and batch[key].dtype not in dtypes:
            expected = " or ".join(str(d) for d in dtypes)
            raise Refusal("dtype", f"{key} has dtype {batch[key].dtype}, expected {expected} ({env})", _SAME_RUN)


def _check_schema(batch: Batch, schema: Schema, env: str) -> None:
    """Raise Refusal unless ``batch`` holds exactly the arrays of ``schema``, each with one row per
    transition (at least one), rows of the expected shape and the expected dtype, finite rewards
    and discounts."""
    _check_keys(batch, schema)
    rows = {k: (v.shape[0] if v.ndim else None) for k, v in batch.items()}
    if len(set(rows.values())) != 1 or None in rows.values():
        raise Refusal("rows", f"its arrays hold different numbers of rows ({', '.join(f'{k} {n}' for k, n in rows.items())}; "
                      "one row per transition in every array)", _SENDER_BUG)
    if batch["reward"].shape[0] == 0:
        raise Refusal("empty", "its arrays hold 0 rows (a chunk with no transitions carries no arrays, only "
                      "meta.env_steps)", _SENDER_BUG)
    _check_rows(batch, schema, 1, env)
    for key in ("reward", "discount"):
        bad = int(np.count_nonzero(~np.isfinite(batch[key])))
        if bad:
            raise Refusal("nonfinite", f"{bad} of its {len(batch[key])} {key} values are not finite (nan or inf)",
                          "fix the worker's env (or wrap it to replace non-finite rewards)")


def _check_rollout(batch: Batch, schema: Schema, size: tuple[int, int], env_steps: int, env: str, algo: str) -> None:
    """Raise Refusal unless ``batch`` is a [T, n] rollout of ``size`` (num_steps, env.num_envs) holding
    exactly the arrays of ``schema`` with their trailing shapes and dtypes, finite where it matters,
    and ``env_steps`` is T x n."""
    _check_keys(batch, schema)
    lead = {k: v.shape[:2] if v.ndim >= 2 else v.shape for k, v in batch.items()}
    if len(set(lead.values())) != 1 or any(len(d) != 2 for d in lead.values()):
        shapes = ", ".join(f"{k} {'x'.join(map(str, d)) or 'scalar'}" for k, d in lead.items())
        raise Refusal("rows", f"its arrays do not share the [steps, envs] leading axes of a rollout ({shapes})",
                      _SENDER_BUG)
    steps, width = batch["reward"].shape
    if (steps, width) != size:
        section = algo.rpartition(":")[2]
        raise Refusal("shape", f"a rollout of {steps} steps x {width} envs, the trainer's is {size[0]} x {size[1]} "
                      f"({section}.num_steps x env.num_envs; {env})", f"run the worker with the trainer's "
                      f"--set {section}.num_steps={size[0]} --set env.num_envs={size[1]} (or its --config)")
    _check_rows(batch, schema, 2, env)
    if env_steps != steps * width:
        raise Refusal("env_steps", f"its meta.env_steps is {env_steps}, its rollout holds {steps} x {width} = "
                      f"{steps * width} steps", _SENDER_BUG)
    for key in ROLLOUT_FINITE:
        bad = int(np.count_nonzero(~np.isfinite(batch[key])))
        if bad:
            fix = ("fix the worker's env (or wrap it to replace non-finite rewards)" if key == "reward" else
                   "the worker's policy produced them: check its weights and observations (obs_norm for large ones)")
            raise Refusal("nonfinite", f"{bad} of its {batch[key].size} {key} values are not finite (nan or inf)", fix)


def _decode_spaces(data: Any) -> tuple[gym.Space, gym.Space] | str:
    """meta.spaces as (observation space, action space), or what is wrong with it."""
    if data is None:
        return "it has none"
    if not isinstance(data, dict) or set(data) != {"observation", "action"}:
        return "it must be a map of \"observation\" and \"action\""
    try:
        return space_from_data(data["observation"]), space_from_data(data["action"])
    except SpaceDataError as exc:
        return str(exc)


def _moments_problem(moments: Any, shape: tuple[int, ...]) -> str | None:
    """What is wrong with meta.obs_moments (None: count > 0, mean and var of the observation shape,
    finite, var >= 0)."""
    if not isinstance(moments, dict) or set(moments) != {"count", "mean", "var"}:
        return "must be a map of count, mean and var"
    count = moments["count"]
    if not isinstance(count, (int, float)) or isinstance(count, bool) or not np.isfinite(count) or count <= 0:
        return f"count is {count!r}, not a number > 0"
    for key in ("mean", "var"):
        try:
            value = np.asarray(moments[key], dtype=np.float64)
        except (TypeError, ValueError):
            return f"{key} is not an array of numbers"
        if value.shape != shape:
            return f"{key} has shape {value.shape}, the observations' is {shape}"
        if not np.isfinite(value).all():
            return f"{key} holds values that are not finite"
        if key == "var" and (value < 0).any():
            return "var holds negative values"
    return None


def _numbers(value: Any) -> list:
    if not isinstance(value, list):
        return []
    return [v for v in value if isinstance(v, (int, float)) and not isinstance(v, bool) and np.isfinite(v)]


def make_relay_source(config: RunConfig, stop: threading.Event | None = None
                      ) -> tuple[RelaySource, tuple[gym.Space, gym.Space] | None]:
    """The trainer's end of a relay (``--server``): remote workers instead of local ones. Returns the
    source and, with ``net.remote_env``, the spaces the workers reported (the trainer builds no env and
    evaluates from their test episodes); otherwise None: the trainer's own evaluation envs give them.

    On-policy, ``config.workers`` is how many remote workers' rollouts make one learner rollout
    (PPO) or how many column slots their rollouts fill (APPO). ``stop``: the Ctrl-C event (RelaySource)."""
    entry = get_algo(config.algo)
    if config.backend not in ("auto", "inline"):
        raise ConfigError(f"--server learns from the workers connected to the relay, not from --backend "
                          f"{config.backend}: drop --backend (start `relayrl worker --server ...` on each machine)")
    if config.workers != 1 and not entry.on_policy:
        raise ConfigError(f"--server with {config.algo} learns from whatever workers are connected to the relay: drop "
                          "--workers (it counts the remote workers whose rollouts make one rollout of ppo or appo)")
    config.algo_config.check_placement(config.algo, "relay")  # e.g. PPO's prenorm needs the trainer's own envs
    if config.net.remote_env:
        source = RelaySource(config, stop=stop)
        try:
            return source, source.await_spaces()
        except BaseException:
            source.close()
            raise
    from relayrl.envs.registry import make

    env = make(config.env.id, **config.env.wrapping(), **config.env.kwargs)
    try:
        return RelaySource(config, env.observation_space, env.action_space, stop), None
    finally:
        env.close()
