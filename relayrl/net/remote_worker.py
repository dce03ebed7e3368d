"""``relayrl worker``: a rollout worker on a robot or game PC, reaching the trainer through the relay.

    relayrl worker --server relay.example.org:5555 --env Pendulum-v1 --algo sac --keys keys/worker1

It is the runtime's RolloutWorker (the same policy and collector code as every other backend) with
the relay as transport: chunks go out stamped (worker name, seq, policy version) and stay in the
client's backlog until the trainer acknowledges them; the newest weights are taken between chunks
and saved to ``net.weights_dir`` (``latest.safetensors``, plus a copy every ``net.model_history``
versions), and loaded again at start (for ``--standalone`` and ``--expert`` runs).

It collects only what the trainer takes (``_waiting_for``): nothing while the relay is unreachable
or has no trainer, nor while it holds no weights of the connected trainer's run (weights carry the
publishing trainer's incarnation; saved ones and an earlier run's are not enough), and at most
min(``net.window``, ``net.backlog``) chunks not yet acknowledged (credit-based flow control). While
it waits it sleeps on the client's socket thread (no stepping, no busy loop), holds real-time envs,
and says what it waits for after a second (again every 30 s).

On-policy algorithms (PPO, APPO) send each rollout as one chunk, [T, n] arrays as a RolloutStore
holds them, with the moments of the observations acted on (``meta.obs_moments``, for ``obs_norm``).
While a worker waits for a trainer run's weights it sends that run one announcement, a chunk with no
arrays that describes its env's spaces (a trainer with ``net.remote_env`` needs them before it can
publish).
PPO collects exactly one rollout per weights version: after sending it waits for new weights, and
collects again with the same version after ``net.pace_timeout_s`` (a lost broadcast cannot
deadlock it; the trainer drops the repeat). APPO collects continuously, with at most
``net.rollouts_in_flight`` rollouts not yet taken by the trainer (its bounded queue, as on mp).

Every chunk describes the env's spaces (``meta.spaces``, envs/space_data.py: about 150 bytes of header
for CartPole) so the trainer can check them, or take them (``net.remote_env``).

Modes (TMRL's): ``expert`` sends samples and never loads weights (a scripted or human policy, or a
fixed saved one; off-policy algorithms only); ``standalone`` runs the saved policy with no server
(deployment).
"""

from __future__ import annotations

import json
import re
import sys
import threading
import time
from pathlib import Path
from functools import partial
from typing import Any, Callable

import numpy as np

from relayrl.algos import get_algo
from relayrl.envs.masks import info_mask
from relayrl.envs.registry import make
from relayrl.errors import CheckpointError, ConfigError, RelayRLError
from relayrl.io.atomic import atomic_write_bytes
from relayrl.io.checkpoint import explain_load_error
from relayrl.net import wire
from relayrl.net.client import Backoff, RelayClient
from relayrl.net.hooks import load_hook
from relayrl.envs.space_data import space_to_data
from relayrl.net.chunk_checks import crc_of
from relayrl.options import RunConfig
from relayrl.policy.normalizer import RunningMeanStd
from relayrl.policy.scripted import ScriptedPolicy, load_script
from relayrl.runtime.messages import InsertTransitions, LoadParams
from relayrl.runtime.rollout_worker import RolloutWorker
from relayrl.usercode import defined_at
from relayrl.types import Batch

LATEST = "latest.safetensors"
LOG_EVERY_S = 10.0
NOTICE_S = 1.0  # a wait on a peer (relay, trainer, weights) is said after this long
REMIND_S = 30.0  # and again every this long while it lasts
WAIT_SLICE_S = 0.25  # the longest sleep between looks at the stop event
_NEVER = object()
MAX_SPACES_BYTES = 16 * 1024  # of a chunk's header (at most 64 KiB): meta.spaces must leave room for the rest


def default_weights_dir(config: RunConfig) -> Path:
    return Path("relayrl-worker") / re.sub(r"[^A-Za-z0-9_.-]", "_", f"{config.env.id}_{config.algo}")


class RemoteWorker:
    def __init__(self, config: RunConfig, *, name: str | None = None, expert: bool = False,
                 standalone: bool = False, weights: str | Path | None = None,
                 policy: str | Callable[[np.ndarray], Any] | None = None):
        """``policy``: a scripted or human policy (``"module:function"`` or the function: policy/scripted.py)
        acting instead of the trainer's weights, which it never loads (an expert worker)."""
        net = config.net
        if not standalone and net.server is None:
            raise RelayRLError("relayrl worker needs --server HOST:PORT (or --standalone to run the saved policy)")
        entry = get_algo(config.algo)
        if (expert or policy is not None) and entry.on_policy:
            what = "--policy" if policy is not None else "--expert"
            raise ConfigError(f"{what} with {config.algo}: an on-policy algorithm learns from its own policy's "
                              "rollouts (their log-probabilities and values), not from another policy's actions; "
                              f"use {what} with an off-policy algorithm (sac, td3, dqn...)")
        acting = None
        if policy is not None:
            expert = True  # (its actions are the function's: the trainer's weights would change nothing)
            reference = policy if isinstance(policy, str) else defined_at(policy)  # (named in its messages)
            function = load_script(policy) if isinstance(policy, str) else policy
            acting = partial(ScriptedPolicy, function=function, reference=reference)
        self.config, self.expert, self.standalone = config, expert, standalone
        self.on_policy, self.synchronous = entry.on_policy, entry.collect_on_request
        self.has_weights = False  # holds weights of a known version (the trainer's, or saved with it)
        self._weights_run: int | None = None  # the trainer run (incarnation) of the weights held; None: saved ones
        self._sent_version: int | None = None  # PPO: the version of the last rollout sent
        self._waiting_since: float | None = None
        self._announced: object = _NEVER  # the trainer run told this worker's spaces
        self._wait: tuple[str, float, float | None] | None = None  # (what, since, last said) while waiting
        self.weights_dir = Path(net.weights_dir) if net.weights_dir else default_weights_dir(config)
        self._pending: list[InsertTransitions] = []
        self._test_returns: list[float] = []
        self.episodes = 0
        self.env_steps = 0
        self.versions_received = 0
        self._steps_this_version = 0
        self._paced_since: float | None = None
        self.pace_timeouts = 0
        if config.threads is None or config.threads > 0:  # (one torch thread acts fastest on small networks, and
            import torch  # many threads that spin on a busy machine make every step slow; null: 1 here)

            torch.set_num_threads(config.threads or 1)
        self.worker = RolloutWorker(0, config, config.seed, acting)
        self.client: RelayClient | None = None
        try:
            venv = self.worker.venv
            self.spaces = {"observation": space_to_data(venv.single_observation_space),
                           "action": space_to_data(venv.single_action_space)}
            size = len(json.dumps(self.spaces))
            if size > MAX_SPACES_BYTES:
                raise RelayRLError(f"the env's spaces take {size} bytes to describe, more than the {MAX_SPACES_BYTES} "
                                   "a chunk's header leaves for them (a Box with different bounds per entry): give it "
                                   "uniform bounds, or flatten it")
            self._load_saved(Path(weights) if weights else None)
            self.compress = load_hook(net.compressor, "net.compressor")
            if not standalone:
                self.client = RelayClient(net.server, "worker", name=name, keys=net.keys, heartbeat_s=net.heartbeat_s,
                                          timeout_s=net.timeout_s, backlog=net.backlog, window=net.window,
                                          max_message_mb=net.max_message_mb, backoff=Backoff.of(net),
                                          pull_s=net.param_pull_s)
                # (an on-policy worker without weights has none the relay could think current: it asks for them)
                self.client.version = self.worker.version if self.has_weights or not self.on_policy else -1
        except BaseException:
            self.worker.close()
            raise

    # ---------------------------------------------------------------- weights

    def _load_saved(self, path: Path | None) -> None:
        """Weights from ``path`` (a file this worker saved, or a run checkpoint), else the latest saved
        in weights_dir, else the policy's initial weights."""
        if path is None:
            path = self.weights_dir / LATEST
            if not path.is_file():
                if self.standalone:
                    raise CheckpointError(f"no saved weights in {self.weights_dir}: run the worker against a trainer "
                                          "first, or pass --weights FILE (a saved latest.safetensors or a run's "
                                          "checkpoints/best.safetensors)")
                return
        if not path.is_file():
            raise CheckpointError(f"--weights {path}: no such file")
        blob = path.read_bytes()
        try:
            tree, version = wire.weights_from_bytes(blob), _saved_version(path)
        except wire.WireError:
            from relayrl.io.checkpoint import load_checkpoint

            tree, version = load_checkpoint(path).state["algo"], None
        self._apply(tree, 0 if version is None else version, str(path))
        # on-policy, a rollout's version must name the trainer's weights it was collected with: weights of
        # unknown version (a run checkpoint, a file without its latest.json) wait for the trainer's
        self.has_weights = version is not None

    def _apply(self, tree: dict[str, Any], version: int, source: str) -> None:
        try:
            self.worker.load(LoadParams(version, tree), self.env_steps)
        except (RuntimeError, KeyError, ValueError) as exc:
            raise RelayRLError(f"weights from {source} do not fit this worker's {self.config.algo} policy "
                               f"({explain_load_error(exc)}): give the worker the same --config/--set options "
                               "as the trainer") from None
        self.has_weights = True

    def _take_weights(self) -> None:
        msg = self.client.take_weights() if self.client is not None else None
        if msg is None or self.expert or msg.blob is None:
            return
        try:
            tree = wire.weights_from_bytes(msg.blob)
        except wire.WireError as exc:
            print(f"relayrl worker: ignored weights version {msg.version}: {exc}", file=sys.stderr)
            return
        self._apply(tree, msg.version, f"the trainer (version {msg.version})")
        self._weights_run = msg.incarnation
        self.client.version = msg.version
        self._steps_this_version = 0
        self.versions_received += 1
        self._save(msg.blob, msg.version)

    def _save(self, blob: bytes, version: int) -> None:
        self.weights_dir.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(self.weights_dir / LATEST, blob)
        atomic_write_bytes(self.weights_dir / "latest.json", json.dumps({"version": version}).encode())
        every = self.config.net.model_history
        if every and self.versions_received % every == 0:
            (self.weights_dir / "history").mkdir(exist_ok=True)
            atomic_write_bytes(self.weights_dir / "history" / f"v{version:09d}.safetensors", blob)

    # ---------------------------------------------------------------- collection

    def run(self, max_steps: int | None = None, stop: threading.Event | None = None, log=sys.stderr) -> dict:
        """Collect and send until ``stop`` is set, ``max_steps`` env steps, or Ctrl-C."""
        if self.standalone:
            raise RelayRLError("a standalone worker only runs episodes: use run_episodes()")
        stop = stop or threading.Event()
        next_log = time.monotonic() + LOG_EVERY_S
        started = time.monotonic()
        while not stop.is_set() and (max_steps is None or self.env_steps < max_steps):
            self._take_weights()
            waiting = self._waiting_for()
            if waiting is not None:
                self._idle(*waiting, log)
                continue
            self._end_wait(log)
            if not (self._ready_on_policy(stop) if self.on_policy else self._paced(stop)):
                continue
            msg = self.worker.collect()
            self._steps_this_version += msg.env_steps
            self.env_steps += msg.env_steps
            self._after_episodes(len(msg.episode_returns))
            self._pending.append(msg)
            if self.on_policy:  # the chunk is the rollout
                self._sent_version = msg.version
                self._send_if_ready(force=True)
            else:
                self._send_if_ready()
            if log is not None and time.monotonic() >= next_log:
                next_log = time.monotonic() + LOG_EVERY_S
                stats = self.client.stats
                timing = self.timing()
                clock = (f", real-time clock: {int(timing['late_steps'])} late steps, jitter "
                         f"{timing['jitter'] * 1e3:.1f} ms" if timing else "")
                print(f"relayrl worker {self.client.name}: {self.env_steps} env steps "
                      f"({self.env_steps / (time.monotonic() - started):.0f}/s), policy version {self.worker.version}, "
                      f"unacknowledged {self.client.unacknowledged()}, backlog drops {stats['backlog_drops']}, "
                      f"{_refused_text(self.client.chunk_refusals)}"
                      f"{'connected' if self.client.connected.is_set() else 'reconnecting'}{clock}", file=log,
                      flush=True)
        return self.stats()

    # ---------------------------------------------------------------- waiting for peers (flow control)

    def _waiting_for(self) -> tuple[str, str, float] | None:
        """What the worker must wait for before it collects (None: nothing): (what, the words for it,
        seconds before saying so). It collects only while the relay is connected and has a trainer,
        with weights of that trainer's run (not an earlier run's, saved or kept by the relay; an
        expert needs none), and while fewer than min(net.window, net.backlog) of its chunks wait
        for the trainer's acknowledgement: flow control by credits, so it collects what the trainer
        takes and its backlog drops nothing while the trainer is there."""
        client, net = self.client, self.config.net
        server = net.server
        if not client.connected.is_set():
            return ("relay", f"the relay at {server} (is `relayrl serve --bind {server}` running there, and does "
                             "--keys hold keys it accepts?)", NOTICE_S)
        if not client.trainer_present():
            return ("trainer", f"a trainer at the relay {server} (`relayrl train {self.config.algo} --env "
                               f"{self.config.env.id} --server {server}`); collecting nothing meanwhile", NOTICE_S)
        if not self.expert and not self._weights_of_this_run():
            self._announce()
            return "weights", f"the weights of the trainer's run (from the relay at {server})", NOTICE_S
        credit = min(net.window, net.backlog)
        if client.unacknowledged() >= credit:
            return ("acks", f"the trainer to take this worker's chunks ({client.unacknowledged()} not yet "
                            f"acknowledged, at most min(net.window, net.backlog) = {credit})", LOG_EVERY_S)
        return None

    def _weights_of_this_run(self) -> bool:
        """Holds weights from the trainer the relay has now (with a relay or trainer of an earlier
        revision, which do not name the run: weights received from the relay)."""
        run = self._weights_run
        if run is None:
            return False
        return not self.client.reports_trainer or run in (self.client.trainer_run, 0)

    def _announce(self) -> None:
        """Tell each trainer run this worker's spaces while it waits for its weights (with net.remote_env
        the trainer needs them before it can publish any): a chunk with no arrays, version -1."""
        if self._announced == self.client.trainer_run:
            return
        self.client.send_samples({}, -1, {"env_steps": 0, "returns": [], "lengths": [], "test_returns": [],
                                          "spaces": self.spaces})
        self._announced = self.client.trainer_run

    def _idle(self, what: str, text: str, notice_s: float, log) -> None:
        """Wait a little for ``what`` without stepping (sleeping until the relay says something), and say
        so once it has lasted ``notice_s`` (again every REMIND_S)."""
        now = time.monotonic()
        if self._wait is None or self._wait[0] != what:
            if self._wait is None:
                self._hold_envs()
            self._wait = (what, now, None)
        _, since, said = self._wait
        if log is not None and now - since >= notice_s and (said is None or now - said >= REMIND_S):
            so_far = f" ({now - since:.0f} s so far)" if said is not None else ""
            print(f"relayrl worker {self.client.name}: waiting for {text}{so_far}", file=log, flush=True)
            self._wait = (what, since, now)
        self.client.wait_change(WAIT_SLICE_S)

    def _end_wait(self, log) -> None:
        if self._wait is not None and self._wait[2] is not None and log is not None:
            print(f"relayrl worker {self.client.name}: collecting again (waited {time.monotonic() - self._wait[1]:.0f} "
                  f"s for the {self._wait[0]})", file=log, flush=True)
        self._wait = None

    def _ready_on_policy(self, stop: threading.Event) -> bool:
        """On-policy: whether to collect a rollout now (else it has waited a little, never spinning).
        PPO: once per new version (again after pace_timeout_s); APPO: while fewer than
        net.rollouts_in_flight rollouts wait for the trainer."""
        net = self.config.net
        if not self.synchronous:
            return self.client.wait_unacknowledged(net.rollouts_in_flight, 0.5)
        if self._sent_version is None or self.worker.version != self._sent_version:
            self._waiting_since = None
            return True  # new weights: their rollout
        now = time.monotonic()
        if self._waiting_since is None:
            self._waiting_since = now
        if now - self._waiting_since >= net.pace_timeout_s:
            self.pace_timeouts += 1
            if self.pace_timeouts == 1:
                print(f"relayrl worker: no new weights for {net.pace_timeout_s:g} s after the rollout of version "
                      f"{self.worker.version}; collecting another with it (the trainer drops it if it has one). If "
                      "the trainer is not just slow, check that it runs (and with as many --workers as there are "
                      "workers), or raise net.pace_timeout_s", file=sys.stderr, flush=True)
            self._waiting_since = None
            return True
        self.client.wait_weights(min(0.5, net.pace_timeout_s - (now - self._waiting_since)))
        return False

    def _paced(self, stop: threading.Event) -> bool:
        """False while this version has had its ``max_steps_per_update`` env steps (waits a little)."""
        limit = self.config.net.max_steps_per_update
        warmup = self.config.algo_config.transitions_before_learning()
        if limit is None or self.expert or self._steps_this_version < limit or self.env_steps < warmup:
            self._paced_since = None
            return True  # (no pacing before the trainer's warm-up: it publishes nothing new till then)
        if self._pending:
            self._send_if_ready(force=True)  # the trainer needs these to make the next version
        now = time.monotonic()
        if self._paced_since is None:
            self._paced_since = now
            self._hold_envs()
        elif now - self._paced_since > self.config.net.pace_timeout_s:
            self.pace_timeouts += 1
            if self.pace_timeouts == 1:
                print(f"relayrl worker: no new weights for {self.config.net.pace_timeout_s:g} s after "
                      f"{self._steps_this_version} steps of version {self.worker.version}; collecting on. If the "
                      "trainer is not just slow, make its update_model_interval at most max_steps_per_update x "
                      "updates_per_step", file=sys.stderr, flush=True)
            self._steps_this_version, self._paced_since = 0, None
            return True
        stop.wait(0.02)
        return False

    def _hold_envs(self) -> None:
        """A real-time env (relayrl.envs.realtime, rtgym) keeps acting with the last action while no
        one steps it; its ``wait()`` applies the safe default action instead, and its next step
        restarts the clock without counting the pause as a late step."""
        for env in getattr(self.worker.venv, "envs", []):
            hold = getattr(env.unwrapped, "wait", None)
            if callable(hold):
                hold()

    def _send_if_ready(self, force: bool = False) -> None:
        rows = sum(len(m.batch.get("reward", ())) for m in self._pending)
        if not self._pending or (rows < self.config.net.min_samples_per_worker_packet and not force):
            return
        batches = [m.batch for m in self._pending if m.batch]
        batch: Batch = {k: np.concatenate([b[k] for b in batches]) for k in batches[0]} if batches else {}
        meta: dict[str, Any] = {
            "env_steps": sum(m.env_steps for m in self._pending),
            "returns": [float(r) for m in self._pending for r in m.episode_returns],
            "lengths": [int(n) for m in self._pending for n in m.episode_lengths],
            "test_returns": self._test_returns,
            "collect_s": sum(m.collect_s for m in self._pending)}  # (the trainer's workers/ideal_steps_per_s)
        timing = self.timing()
        if timing:
            meta["timing"] = timing
        version = min(m.version for m in self._pending)  # the oldest policy in the chunk: staleness errs high
        meta["spaces"] = self.spaces
        moments = [m.obs_moments for m in self._pending if m.obs_moments is not None]
        if moments:
            meta["obs_moments"] = _merged_moments(moments)
        if self.config.net.crc_debug:
            meta["crc"] = crc_of(batch)
        out = self.compress(batch) if self.compress is not None and batch else batch
        self.client.send_samples(out, version, meta)
        self._pending, self._test_returns = [], []

    def _after_episodes(self, finished: int) -> None:
        every = self.config.net.test_episode_interval
        for _ in range(finished):
            self.episodes += 1
            if every and self.episodes % every == 0:
                self._test_returns.append(self.run_episodes(1, seed=self.config.seed + self.episodes)[0])

    def run_episodes(self, episodes: int, seed: int | None = None, render: bool = False) -> list[float]:
        """Deterministic episodes with the current policy (test episodes, and standalone mode)."""
        env_cfg = self.config.env
        env = make(env_cfg.id, max_episode_steps=env_cfg.max_episode_steps,
                   render_mode="human" if render else None, **env_cfg.wrapping(), **env_cfg.kwargs)
        returns = []
        try:
            for k in range(episodes):
                obs, info = env.reset(seed=None if seed is None else seed + k)
                self.worker.policy.reset_hidden("eval")  # (recurrent policies: a new episode)
                total, done = 0.0, False
                while not done:
                    mask = info_mask(info, env.action_space)
                    action = self.worker.policy.act_masked(np.asarray(obs)[None], "eval", mask).env_action[0]
                    obs, reward, terminated, truncated, info = env.step(action)
                    total += float(reward)
                    done = terminated or truncated
                returns.append(total)
        finally:
            env.close()
        return returns

    def timing(self) -> dict[str, float]:
        """Real-time envs' clock statistics (relayrl.envs.realtime), worst over this worker's envs:
        late steps, jitter (s), mean time between steps spent outside the env (s). Empty otherwise."""
        stats = [t() for env in getattr(self.worker.venv, "envs", [])
                 if callable(t := getattr(env.unwrapped, "timing", None))]
        if not stats:
            return {}
        return {"late_steps": float(sum(s["late_steps"] for s in stats)),
                "jitter": float(max(s["jitter"] for s in stats)),
                "inference_mean": float(max(s["inference_mean"] for s in stats))}

    def stats(self) -> dict:
        out = {"env_steps": self.env_steps, "episodes": self.episodes, "version": self.worker.version,
               "versions_received": self.versions_received, "pace_timeouts": self.pace_timeouts}
        if self.client is not None:
            out.update(self.client.stats)
        return out

    def close(self, flush_timeout: float = 30.0) -> None:
        """Send what is pending and wait up to ``flush_timeout`` for the trainer to acknowledge it
        (through a relay restart too: the client reconnects and resends meanwhile)."""
        try:
            if self.client is not None:
                if self._pending:
                    self._send_if_ready(force=True)
                deadline = time.monotonic() + flush_timeout
                # (no waiting on a relay that has no trainer: nobody would acknowledge them)
                while (self.client.unacknowledged() and time.monotonic() < deadline and self.client.refused is None
                       and (self.client.trainer_present() or not self.client.connected.is_set())):
                    time.sleep(0.02)
                left = self.client.unacknowledged()
                if left and flush_timeout > 0:
                    print(f"relayrl worker: {left} chunks were not acknowledged by a trainer (those the relay "
                          "received stay queued there for the next one; the others are lost)", file=sys.stderr)
                self.client.close()
        finally:
            self.worker.close()


def _merged_moments(moments: list[dict[str, np.ndarray]]) -> dict[str, Any]:
    """Observation moments (count, mean, var) as plain data for meta.obs_moments (docs/wire-protocol.md)."""
    total = RunningMeanStd(np.shape(moments[0]["mean"]))
    for m in moments:
        total.merge_state(m)
    return {"count": float(total.count), "mean": total.mean.tolist(), "var": total.var.tolist()}


def _saved_version(path: Path) -> int | None:
    """The version saved next to ``path`` (latest.json), None if unknown."""
    try:
        return int(json.loads((path.parent / "latest.json").read_text())["version"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _refused_text(refusals: dict[str, int]) -> str:
    """"refused 12 (shape 12), " for the log line, or "" while nothing was refused."""
    if not refusals:
        return ""
    causes = ", ".join(f"{cause} {n}" for cause, n in sorted(refusals.items()))
    return f"refused {sum(refusals.values())} ({causes}), "
