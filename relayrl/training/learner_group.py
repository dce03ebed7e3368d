"""Data-parallel learners placed on local processes (``learners`` > 1; docs/distributed.md "Learners").

``run_learners(config, **options)`` (what ``relayrl.launch.run`` calls for ``learners`` > 1) is the supervisor:
it refuses what the learners cannot share, starts N learner processes (spawn) that meet at a free port of
127.0.0.1 (or MASTER_ADDR:MASTER_PORT), and watches them. Each learner runs a ``GroupTrainer`` on its share
(training/group_trainer.py: its own envs, its rows of each minibatch, agreed counts and stops; learner 0 writes
the run).

The supervisor does not learn: it stays free to see a learner die (its exit code or signal) or stop making
progress (a clock each learner sets every round, in shared memory), to end the others, and to restart the
whole group from the last checkpoint (``max_learner_restarts``). Ctrl-C and SIGTERM reach it alone (the learners
ignore them) and it passes the stop on through shared memory, so the learners stop together at a round's end.

Under torchrun (RANK and WORLD_SIZE set), this process is one of the learners: ``join_group`` runs it.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing as mp
import os
import signal
import socket
import threading
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

from relayrl.algos import get_algo
from relayrl.errors import ConfigError, RelayRLError
from relayrl.io.rundir import new_run_dir, read_summary, write_summary
from relayrl.learners import LearnerGroupError, init_collective
from relayrl.learners import per_learner
from relayrl.options import ReplayLoopConfig, RunConfig
from relayrl.envs.subproc import _die_with_parent
from relayrl.training.group_trainer import SharedStop, _device, group_trainer, join_group
from relayrl.training.learner import HookContext
from relayrl.training.stops import STOPPED, StopRequest

log = logging.getLogger("relayrl")

POLL_S = 0.1
GRACE_S = 3.0  # once a learner has failed, how long the others get to end on their own before they are killed


# ---------------------------------------------------------------- refusals


def check_learners(config: RunConfig) -> None:
    """Refuse (ConfigError, before any process starts or file is written) a run its learners cannot share."""
    n = config.learners
    get_algo(config.algo).check_learners(n)
    if n == 1:
        return
    env_id = config.env.id
    if env_id.startswith("bridge:") or env_id.startswith("pettingzoo:"):
        raise ConfigError(f"learners={n} learn from Gymnasium envs of their own; {env_id} brings agent envs, which "
                          "are not shared out among learners: set learners=1")
    if config.net.server is not None:
        raise ConfigError(f"learners={n} collect on envs of their own; experience through the relay (--server) is "
                          "not shared out among learners: set learners=1, or drop --server")
    if config.workers != 1 or config.resolved_backend != "inline":
        raise ConfigError(f"learners={n}: each learner steps its own env.num_envs / learners envs, and rollout "
                          f"workers (workers={config.workers}, backend {config.backend}) are not shared out among "
                          "learners: drop --workers/--backend (raise env.num_envs for more envs), or set learners=1")
    if config.overlap:
        raise ConfigError(f"learners={n} learn and collect in turn: drop overlap, or set learners=1")
    per_learner(config.env.num_envs, n, "env.num_envs")
    cfg = config.algo_config
    from relayrl.algos.ppo_config import PPOConfig

    if isinstance(cfg, (PPOConfig, ReplayLoopConfig)):  # (the algorithms refuse it too, once built)
        per_learner(cfg.batch_size, n, f"{config.algo}.batch_size")


@dataclass
class Plan:
    """What every learner process of one start of the group gets (picklable)."""

    config: dict[str, Any]  # (RunConfig's dump: its class is made per algorithm, and rebuilt where it is read)
    run_dir: str
    init_method: str
    resume: bool
    previous: str | None
    quiet: bool
    tensorboard: bool
    size: int


def run_learner(plan: Plan, rank: int, heartbeat: Any, flag: Any, opened: Callable[[], None]) -> dict[str, Any]:
    """Learner ``rank`` of the plan's group, wherever it was placed (a local process, a Ray actor): its GroupTrainer
    until the run ends; its summary. ``heartbeat[rank]``: its clock, set every round; ``flag.value``: the
    supervisor's stop (1 Ctrl-C, 2 SIGTERM); ``opened()``: called once the run directory exists."""
    from relayrl.config import build_config

    os.environ.update(RANK=str(rank), LOCAL_RANK=os.environ.get("LOCAL_RANK", str(rank)), WORLD_SIZE=str(plan.size))
    config = build_config(plan.config["algo"], plan.config)
    learners = init_collective(rank, plan.size, plan.init_method, _device(config), timeout_s=config.learner_timeout_s)
    trainer = group_trainer(config, learners, heartbeat=heartbeat, run_dir=plan.run_dir, resume=plan.resume,
                            previous=plan.previous, quiet=plan.quiet, tensorboard=plan.tensorboard,
                            stop_event=SharedStop(flag))
    heartbeat[rank] = time.monotonic()
    opened()
    summary = trainer.run()
    learners.close()
    return summary


def outcome(rank: int, heartbeat: Any, flag: Any, plan: Plan, opened: Callable[[], None]) -> tuple[str, Any]:
    """``run_learner``'s end as the supervisor reads it: ("done", summary), ("group", message: a peer failed),
    ("error", (class, message, exit code): the run's own error), or ("crash", traceback)."""
    try:
        return "done", run_learner(plan, rank, heartbeat, flag, opened)
    except LearnerGroupError as error:  # a peer failed: the supervisor names it
        return "group", str(error)
    except RelayRLError as error:
        return "error", (type(error).__name__, str(error), error.exit_code or 1)
    except Exception as error:  # noqa: BLE001 (its traceback, to the supervisor's message)
        return "crash", f"{type(error).__name__}: {error}\n{traceback.format_exc()}"


EXIT_CODES = {"done": 0, "group": 3, "crash": 1}


def learner_main(plan: Plan, rank: int, heartbeat: Any, flag: Any, queue: Any) -> None:
    """A learner process: ``run_learner``; what happened goes to the supervisor's queue."""
    for sig in (signal.SIGINT, signal.SIGTERM):  # (the supervisor stops the group: the flag)
        signal.signal(sig, signal.SIG_IGN)
    _die_with_parent()
    _log_to_stderr(rank)
    kind, payload = outcome(rank, heartbeat, flag, plan, lambda: queue.put(("opened", rank, None)))
    queue.put((kind, rank, payload))
    code = payload[2] if kind == "error" else EXIT_CODES[kind]
    if code:
        raise SystemExit(code)


def _log_to_stderr(rank: int) -> None:
    logger = logging.getLogger("relayrl")
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter(f"relayrl: learner {rank}: %(message)s"))
    logger.handlers[:] = [handler]
    logger.setLevel(logging.INFO if rank == 0 else logging.WARNING)
    logger.propagate = False


# ---------------------------------------------------------------- the supervisor


class LearnerFault(Exception):
    """A learner died, hung or failed; ``restartable``: a fault of the placement (a kill, a hang), not of the run."""

    def __init__(self, message: str, restartable: bool, error: RelayRLError | None = None):
        super().__init__(message)
        self.restartable, self.error = restartable, error


@dataclass
class _Watch:
    """What the supervisor knows of one start of the group."""

    procs: list[Any]
    heartbeat: Any
    reports: dict[int, tuple[str, Any]] = field(default_factory=dict)
    summary: dict[str, Any] | None = None


def run_learners(config: RunConfig, supervisor: type[Supervisor] | None = None, **options: Any) -> dict[str, Any]:
    """Train with ``config.learners`` learners (the module docstring); the summary of learner 0. ``supervisor``:
    what places them (default ``Supervisor``: local processes; training/ray_learners.py's on Ray actors)."""
    check_learners(config)
    if os.environ.get("WORLD_SIZE") and os.environ.get("RANK"):  # started by torchrun: this is one of them
        return join_group(config, **options)
    return (supervisor or Supervisor)(config, options).run()


class Supervisor:
    """Starts the learners as local processes and watches them (the module docstring); ``run`` returns learner 0's
    summary, or raises the error that ended the group."""

    def __init__(self, config: RunConfig, options: dict[str, Any]):
        hooks = options.get("hooks", ())
        others = [position for position, _, _ in hooks if position != "before_run"]
        if others:
            raise ConfigError(f"learners={config.learners}: hooks run in learner processes, which take no functions "
                              f"of this one; {', '.join(others)} hooks are refused (before_run hooks run here once "
                              "the run directory exists): set learners=1 to use them")
        self.config, self.hooks = config, hooks
        self.stop_event = options.get("stop_event")
        self.resume, self.previous = bool(options.get("resume", False)), options.get("previous")
        self.quiet, self.tensorboard = bool(options.get("quiet", True)), bool(options.get("tensorboard", True))
        run_dir = options.get("run_dir")
        self.run_dir = Path(run_dir) if run_dir is not None else new_run_dir(config.env.id, config.algo)
        self._hooks_ran = False

    def run(self) -> dict[str, Any]:
        restarts, resume = 0, self.resume
        while True:
            try:
                summary = self._run_group(resume)
            except LearnerFault as fault:
                if fault.error is not None:
                    raise fault.error from None
                last = self.run_dir / "checkpoints" / "last.safetensors"
                stopping = self.stop_event is not None and self.stop_event.is_set()  # (no restart on the way out)
                if not fault.restartable or stopping or restarts >= self.config.max_learner_restarts or \
                        not last.is_file():
                    raise LearnerGroupError(self._ended(str(fault), restarts, last.is_file())) from None
                restarts += 1
                log.warning("%s; restarting the %d learners from the last checkpoint (restart %d of %d)", fault,
                            self.config.learners, restarts, self.config.max_learner_restarts)
                resume, self.previous = True, None
                continue
            if restarts:
                summary["learner_restarts"] = restarts
                run_dir = Path(summary.get("run_dir", self.run_dir))
                on_disk = {key: value for key, value in summary.items() if key != "run_dir"}
                write_summary(run_dir, {**read_summary(run_dir), **on_disk} if (run_dir / "summary.json").is_file()
                              else on_disk)
            return summary

    def _ended(self, fault: str, restarts: int, checkpoint: bool) -> str:
        kept = (f"the last checkpoint is kept: continue with relayrl train --resume {self.run_dir} (with any "
                "--learners)") if checkpoint else "no checkpoint had been written yet"
        tried = f" after {restarts} restart{'s' if restarts != 1 else ''} of the group" if restarts else ""
        fix = "" if self.config.max_learner_restarts else "; or set max_learner_restarts to restart the group"
        return f"{fault}; the learner group stopped{tried} ({kept}{fix})"

    def _run_group(self, resume: bool) -> dict[str, Any]:
        config, n = self.config, self.config.learners
        context = mp.get_context("spawn")
        plan = Plan(config.model_dump(), str(self.run_dir), _rendezvous(), resume, None if self.previous is None
                    else str(self.previous), self.quiet, self.tensorboard, n)
        heartbeat = context.Array("d", n, lock=False)
        flag = context.Value("i", 0, lock=False)
        queue = context.Queue()
        watch = _Watch([context.Process(target=learner_main, args=(plan, rank, heartbeat, flag, queue),
                                        name=f"relayrl-learner-{rank}") for rank in range(n)], heartbeat)
        try:
            with _signals_ignored():  # (inherited through exec: a Ctrl-C while they start reaches this process alone)
                for proc in watch.procs:
                    proc.start()
            log.info("%d learners started (%s), meeting at %s", n,
                     ", ".join(f"learner {rank} pid {proc.pid}" for rank, proc in enumerate(watch.procs)),
                     plan.init_method)
            return self._watch(watch, queue, flag)
        finally:
            _end(watch.procs)
            queue.close()
            queue.cancel_join_thread()

    def _watch(self, watch: _Watch, queue: Any, flag: Any) -> dict[str, Any]:
        procs, timeout = watch.procs, self.config.learner_timeout_s
        failed_at: float | None = None
        while True:
            self._drain(watch, queue)
            if self.stop_event is not None and self.stop_event.is_set() and flag.value == 0:
                flag.value = stop_code(self.stop_event)
            codes = [proc.exitcode for proc in procs]
            if all(code == 0 for code in codes):
                self._drain(watch, queue, wait=True)
                if watch.summary is None:
                    raise LearnerFault("learner 0 ended without a summary", restartable=True)
                return watch.summary
            if any(code not in (None, 0) for code in codes) and codes[0] == 0 and watch.summary is not None:
                log.warning("learner 0 ended the run, but %s", "; ".join(  # (e.g. a crash on the way out)
                    f"learner {rank} exited with code {code}" for rank, code in enumerate(codes) if code))
                return watch.summary
            if any(code not in (None, 0) for code in codes):
                failed_at = failed_at or time.monotonic()
                if all(code is not None for code in codes) or time.monotonic() - failed_at > GRACE_S:
                    self._drain(watch, queue, wait=True)
                    raise self._fault(watch)
            elif watch.summary is not None and failed_at is None:
                failed_at = time.monotonic()  # learner 0 is done: the others end within the timeout
            elif watch.summary is not None and time.monotonic() - failed_at > timeout:
                return watch.summary
            beats = [watch.heartbeat[rank] for rank in range(len(procs))]
            if failed_at is None and all(beat > 0 for beat in beats) and \
                    time.monotonic() - max(beats) > 2 * timeout + 30:  # (the collectives' timeouts come first)
                raise self._fault(watch)
            time.sleep(POLL_S)

    def _drain(self, watch: _Watch, queue: Any, wait: bool = False) -> None:
        deadline = time.monotonic() + (1.0 if wait else 0.0)
        while True:
            try:
                kind, rank, payload = queue.get(timeout=max(0.0, deadline - time.monotonic())) if wait \
                    else queue.get_nowait()
            except Exception:  # (queue.Empty)
                return
            if kind == "opened" and rank == 0 and not self._hooks_ran:
                self._hooks_ran = True
                for position, fn, _ in self.hooks:  # (before_run: the run directory exists now)
                    fn(HookContext())
            elif kind == "done" and rank == 0:
                watch.summary = payload
            elif kind in ("group", "error", "crash"):
                watch.reports[rank] = (kind, payload)

    @staticmethod
    def _error_fault(name: str, kind: str, payload: Any) -> LearnerFault:
        """The run's own error in a learner (an env, a non-finite loss, bad options): as it is, never restarted."""
        if kind == "crash":
            return LearnerFault(f"{name} failed: {payload.strip()}", restartable=False)
        _, message, code = payload
        error = ConfigError(message) if code == 2 else RelayRLError(f"{name}: {message}")
        error.exit_code = code
        return LearnerFault(message, False, error)

    def _reported_error(self, watch: _Watch, name: Callable[[int], str]) -> LearnerFault | None:
        """The first learner's own error (its env, a non-finite loss, bad options), if one reported any."""
        for rank, (kind, payload) in sorted(watch.reports.items()):
            if kind in ("error", "crash"):
                return self._error_fault(name(rank), kind, payload)
        return None

    def _stalled(self, who: str, since: str) -> LearnerFault:
        """The fault of a learner that stopped making progress (``since``: what is known of its last round)."""
        return LearnerFault(f"{who} stopped making progress ({since}); the others gave up waiting for it after "
                            f"learner_timeout_s={self.config.learner_timeout_s:g} s", restartable=True)

    def _fault(self, watch: _Watch) -> LearnerFault:
        """The learner to blame for the group's end, in one message."""
        procs, n = watch.procs, len(watch.procs)

        def name(rank: int) -> str:
            return f"learner {rank} of {n} (pid {procs[rank].pid})"

        error = self._reported_error(watch, name)
        if error is not None:
            return error
        for rank, proc in enumerate(procs):
            code = proc.exitcode
            if code is not None and code < 0:
                return LearnerFault(f"{name(rank)} was killed by {_signal_name(-code)}", restartable=True)
            if code not in (None, 0, 3):
                return LearnerFault(f"{name(rank)} exited with code {code}", restartable=True)
        now = time.monotonic()
        quiet = [rank for rank in range(n) if rank not in watch.reports and procs[rank].exitcode is None] or \
            [rank for rank in range(n) if procs[rank].exitcode is None] or list(range(n))
        rank = min(quiet, key=lambda r: watch.heartbeat[r])
        beat = watch.heartbeat[rank]
        since = f"its last round began {now - beat:.0f} s ago" if beat > 0 else "it never joined the group"
        return self._stalled(name(rank), since + _process_state(procs[rank].pid))


def stop_code(event: threading.Event) -> int:
    """The learners' stop flag for a set stop event: 1 Ctrl-C ("interrupted"), 2 SIGTERM ("terminated")."""
    reason = event.reason if isinstance(event, StopRequest) else "interrupted"
    return STOPPED.index(reason) + 1 if reason in STOPPED else 1


def _rendezvous() -> str:
    """MASTER_ADDR:MASTER_PORT when both are set, else a free port of 127.0.0.1."""
    addr, port = os.environ.get("MASTER_ADDR"), os.environ.get("MASTER_PORT")
    if addr and port:
        return f"tcp://{addr}:{port}"
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"tcp://127.0.0.1:{sock.getsockname()[1]}"


@contextlib.contextmanager
def _signals_ignored() -> Iterator[None]:
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    saved = {sig: signal.signal(sig, signal.SIG_IGN) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)


def _end(procs: list[Any]) -> None:
    """Every learner still running is killed (a stopped one too), and every one reaped."""
    for proc in procs:
        if proc.pid is not None and proc.exitcode is None:
            proc.kill()
    for proc in procs:
        if proc.pid is not None:
            proc.join(timeout=10)


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _process_state(pid: int | None) -> str:
    """", stopped (SIGSTOP)" and the like, from /proc where there is one."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            code = stat.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return ""
    return {"T": ", its process is stopped (SIGSTOP?)", "t": ", its process is stopped by a debugger",
            "D": ", its process waits on the disk", "Z": ", its process has exited"}.get(code, "")
