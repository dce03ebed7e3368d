"""The trainer side of the bridge: an external simulator as behaviours of many agents.

    with BridgeEnv("path/to/simulator") as env:       # or BridgeEnv(attach=True) for an editor
        env.reset()
        for _ in range(1000):
            for name in env.behaviours:
                decisions, terminations = env.get_steps(name)
                env.set_actions(name, continuous=policy(decisions.obs[0]))
            env.step()

``get_steps`` returns zero-copy views of the shared memory, valid until the next ``step``/``reset``
(``.copy()`` keeps them). Errors (the simulator died, closed, timed out, speaks another protocol
version) are ``BridgeError`` subclasses with a message that says what to do.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np

from relayrl.bridge import layout as L
from relayrl.bridge.channel import BridgeError, Channel
from relayrl.bridge.errors import BridgeTimeout, PeerDied, SimulatorNotStarted
from relayrl.bridge.files import pid_alive
from relayrl.bridge.sidechannel import SideChannel, SideChannels

CLOSE_GRACE_S = 5.0


@dataclass
class DecisionSteps:
    """Agents that request a decision this turn: row i of every array is the same agent."""

    obs: list[np.ndarray]  # one [n, *shape] array per observation
    reward: np.ndarray  # [n] float32, since the agent's previous decision
    agent_id: np.ndarray  # [n] int64
    action_mask: list[np.ndarray]  # one [n, branch size] bool array per branch; True = forbidden

    def __len__(self) -> int:
        return len(self.agent_id)

    def copy(self) -> "DecisionSteps":
        return DecisionSteps([o.copy() for o in self.obs], self.reward.copy(), self.agent_id.copy(),
                             [m.copy() for m in self.action_mask])


@dataclass
class TerminalSteps:
    """Agents whose episode ended this turn, with their final observation."""

    obs: list[np.ndarray]
    reward: np.ndarray
    interrupted: np.ndarray  # [n] bool: cut by a step limit (truncated), not a terminal state
    agent_id: np.ndarray

    def __len__(self) -> int:
        return len(self.agent_id)

    def copy(self) -> "TerminalSteps":
        return TerminalSteps([o.copy() for o in self.obs], self.reward.copy(), self.interrupted.copy(),
                             self.agent_id.copy())


class BridgeEnv:
    """A channel to one simulator: launch its executable (a list or a shell-like string; the memory
    path is appended as ``--memory-path PATH``) or, with ``attach=True``, wait for a running one at
    the fixed editor path. ``side_channels`` are SideChannel objects (engine configuration,
    environment parameters, your own). ``handshake=False`` returns as soon as the simulator is
    launched: call ``handshake()`` before anything else (``BridgeInstances`` starts several at once).
    ``stop``: an event (``relayrl train``'s Ctrl-C) that ends the wait for an attaching simulator with
    ``KeyboardInterrupt`` (looked at every poll slice, 0.1 s)."""

    def __init__(self, executable: str | Sequence[str] | None = None, *, args: Sequence[str] = (),
                 attach: bool = False, timeout_s: float = 60.0, spin_us: float = 500.0,
                 side_channels: Iterable[SideChannel] = (), directory: str | os.PathLike | None = None,
                 log_path: str | os.PathLike | None = None, handshake: bool = True,
                 stop: threading.Event | None = None):
        if (executable is None) == (not attach):
            raise BridgeError("give the simulator executable to launch, or attach=True to wait for a running one")
        self.side_channels = SideChannels(side_channels)
        self.proc: subprocess.Popen | None = None
        self.channel = Channel.create(directory, editor=attach, timeout_s=timeout_s, spin_us=spin_us)
        self._views: dict[str, L.SectionViews] = {}
        self._generation = 0  # of the body the views point into
        self._n: dict[str, tuple[int, int]] = {}
        self._acted: dict[str, set[str]] = {}  # behaviour -> the parts ("continuous", "discrete") set this turn
        self._log = None
        try:
            if executable is not None:
                cmd = shlex.split(executable) if isinstance(executable, str) else list(executable)
                self._log = open(log_path, "ab") if log_path is not None else None
                try:
                    self.proc = subprocess.Popen([*cmd, "--memory-path", str(self.channel.header_path), *args],
                                                 start_new_session=True, stdin=subprocess.DEVNULL,
                                                 stdout=self._log, stderr=self._log)
                except OSError as exc:
                    raise not_started(cmd[0], exc) from None
                self.channel.peer_alive = lambda: self.proc.poll() is None
            else:
                if stop is not None:
                    self.channel.peer_alive = self._attaching(stop)
                print(attach_prompt(self.channel.header_path), file=sys.stderr, flush=True)
        except BaseException:
            self.close()
            raise
        if handshake:
            self.handshake()

    def handshake(self) -> None:
        """Wait for the handshake turn: the simulator's version, behaviours and first decisions."""
        try:
            self.receive()
        except BridgeTimeout:
            self.close()
            if self.proc is not None:
                raise
            raise BridgeTimeout(f"no simulator attached to {self.memory_path} within {self.channel.timeout_s:g} s "
                                "(timeout_s; or one attached but never finished its handshake): start the "
                                f"simulator with --memory-path {self.memory_path}, or raise timeout_s") from None
        except BaseException:
            self.close()
            raise

    # ---- what the simulator offers
    @property
    def memory_path(self) -> Path:
        return self.channel.header_path

    @property
    def behaviours(self) -> dict[str, L.BehaviourSpec]:
        return {name: views.section.spec for name, views in self._views.items()}

    def get_steps(self, behaviour: str) -> tuple[DecisionSteps, TerminalSteps]:
        views = self._get(behaviour)
        n, m = self._n[behaviour]
        return (DecisionSteps([o[:n] for o in views.obs], views.reward[:n], views.ids[:n],
                              [mask[:n] for mask in views.masks]),
                TerminalSteps([o[:m] for o in views.final_obs], views.final_reward[:m], views.interrupted[:m],
                              views.final_ids[:m]))

    def set_actions(self, behaviour: str, continuous: np.ndarray | None = None,
                    discrete: np.ndarray | None = None) -> None:
        """Actions for this turn's deciding agents, row i for decision row i: continuous [n, C]
        (cast to float32, any finite value: the simulator clips to its range, [-1, 1] for relayrl's
        training) and discrete [n, B] (cast to int32; an option the agent's action mask forbids is
        refused: masks are binding). A part not given this turn gets the default answer at ``step``: 0.0,
        or the lowest option each row's mask allows (protocol §3.3)."""
        views = self._get(behaviour)
        spec, (n, _) = views.section.spec, self._n[behaviour]
        if n == 0 and (continuous is not None and np.size(continuous) or discrete is not None and np.size(discrete)):
            raise BridgeError(f"behaviour {behaviour!r} has no agents waiting for a decision this turn: "
                              "send actions only to behaviours whose decision steps are not empty")
        for kind, value, width, out in (("continuous", continuous, spec.continuous, views.continuous),
                                        ("discrete", discrete, len(spec.branches), views.discrete)):
            if value is None:
                continue
            array = np.asarray(value)
            if array.shape != (n, width):
                raise BridgeError(f"{kind} actions for {behaviour!r} have shape {array.shape}, expected ({n}, {width}): "
                                  f"one row per deciding agent ({n} this turn)")
            if kind == "continuous" and not np.isfinite(array).all():
                row = int(np.argwhere(~np.isfinite(array))[0][0])
                raise BridgeError(f"continuous actions for {behaviour!r} hold NaN or infinity (agent "
                                  f"{int(views.ids[row])}): the trainer sends finite values only "
                                  "(docs/bridge-protocol.md §3.3); look for a diverged policy")
            if kind == "discrete":
                bad = (array < 0) | (array >= np.array(spec.branches))
                if bad.any():
                    raise BridgeError(f"discrete actions for {behaviour!r} out of range for branches {spec.branches}")
                self._check_masks(behaviour, views, array.astype(np.int64))
            np.copyto(out[:n], array, casting="unsafe")
            self._acted.setdefault(behaviour, set()).add(kind)

    def _check_masks(self, behaviour: str, views: L.SectionViews, chosen: np.ndarray) -> None:
        """Refuse an option the deciding agent's mask forbids (masks are binding, §3.3)."""
        n = len(chosen)
        mask = views.mask[:n]
        if not mask.any():  # the usual case: one reduction
            return
        starts = np.cumsum((0, *views.section.spec.branches[:-1]))  # M_b: where branch b's options begin
        forbidden = mask[np.arange(n)[:, None], starts + chosen]
        if forbidden.any():
            row, branch = (int(i) for i in np.argwhere(forbidden)[0])
            if views.masks[branch][row].all():
                raise BridgeError(f"the simulator's action mask for agent {int(views.ids[row])} of {behaviour!r} "
                                  f"forbids every option of branch {branch}: no answer is allowed; the simulator must "
                                  "leave at least one option of each branch allowed (docs/bridge-protocol.md §3.3)")
            raise BridgeError(f"discrete action {int(chosen[row, branch])} of branch {branch} for agent "
                              f"{int(views.ids[row])} of {behaviour!r} is forbidden by its action mask: choose among "
                              "the options its mask allows (DecisionSteps.action_mask, True = forbidden); masks are "
                              "binding (docs/bridge-protocol.md §3.3)")

    # ---- turns
    def step(self) -> None:
        """Send the actions set this turn and wait for the next decisions. A behaviour given no actions
        gets 0.0 for every continuous action and the lowest option its masks allow in every branch."""
        self.send_step()
        self.receive()

    def reset(self) -> None:
        """Ask the simulator to reset every behaviour; fresh decisions, no terminations, follow."""
        self.send_reset()
        self.receive()

    def query(self) -> None:
        """Exchange side-channel messages without advancing the simulation (the actions stay owed)."""
        self.channel.set_flag(L.OFF_QUERY, 1)
        self._hand_over(keep_actions=True)

    def _hand_over(self, keep_actions: bool = False) -> None:
        self.send(keep_actions)
        self.receive()

    # A turn's two halves, so that several simulators step at once (``BridgeInstances``): ``send_*``
    # hands the memory over without waiting, ``receive`` waits for the simulator's answer and reads it.
    def send_step(self) -> None:
        """``step()`` without the wait: ``receive()`` next."""
        for name, views in self._views.items():
            n = self._n[name][0]
            acted = self._acted.get(name, set())  # a part not set this turn (both, or one of a hybrid's)
            if n and "continuous" not in acted:
                views.continuous[:n] = 0
            if n and "discrete" not in acted:
                views.discrete[:n] = _lowest_allowed(views, n)
        self.send()

    def send_reset(self) -> None:
        """``reset()`` without the wait: ``receive()`` next."""
        self.channel.set_flag(L.OFF_RESET, 1)
        self.send()

    def send(self, keep_actions: bool = False) -> None:
        if self.channel.closed:
            raise BridgeError("the bridge is closed: create a new BridgeEnv")
        self.channel.write_side(self.side_channels.outgoing())
        if not keep_actions:
            self._acted.clear()
        self.channel.hand_over()

    def receive(self) -> None:
        """Wait for the simulator's turn and read it. A launched simulator that died is reported with
        its exit code or signal."""
        channel = self.channel
        try:
            channel.wait_turn()
            channel.finish_handshake()
        except PeerDied as exc:
            raise self._died(exc) from None
        try:
            channel.sync_body()
            if channel.generation != self._generation:  # a new body, ours or the simulator's: views moved
                self._parse()
            self.side_channels.dispatch(channel.read_side())
            self._n = {}
            for name, views in self._views.items():
                n, m = int(views.counts[0]), int(views.final_counts[0])
                limit = views.section.spec.max_agents
                if n > limit or m > limit:
                    raise channel._fail(f"behaviour {name!r} reports {n} decisions and {m} terminations, "
                                        f"more than its {limit} agents")
                self._n[name] = (n, m)
        except L.LayoutError as exc:
            raise channel._fail(str(exc)) from None

    def _attaching(self, stop: threading.Event):
        """The liveness check of an attach (the channel calls it every poll slice): a stop request ends
        the wait for the simulator; once attached, the simulator's pid says whether it is alive."""
        channel = self.channel

        def alive() -> bool:
            if stop.is_set() and not channel.handshaken:
                raise KeyboardInterrupt
            return pid_alive(channel.peer_pid)
        return alive

    def _died(self, exc: PeerDied) -> PeerDied:
        """The channel's PeerDied with the launched simulator's exit code or signal (checklist A15)."""
        if self.proc is None:
            return exc
        try:
            code = self.proc.wait(timeout=CLOSE_GRACE_S)  # its end of the channel closed: it is exiting
        except subprocess.TimeoutExpired:
            return exc
        return PeerDied(f"the simulator died (pid {self.proc.pid}): it {describe_exit(code)}; see its output")

    def _parse(self) -> None:
        body, self._generation = self.channel.body, self.channel.generation
        self._views = L.section_views(body, self.channel.side, self.channel.rl)

    def _get(self, behaviour: str) -> L.SectionViews:
        try:
            return self._views[behaviour]
        except KeyError:
            raise BridgeError(f"no behaviour {behaviour!r} in the simulator; it has {sorted(self._views)}") from None

    # ---- closing
    def close(self) -> None:
        """Tell the simulator to stop, wait up to 5 s for a launched one, then kill its process group."""
        channel = getattr(self, "channel", None)
        if channel is not None and not channel.closed:
            self._views = {}
            channel.close(L.NORMAL)
        if self.proc is not None and self.proc.poll() is None:
            try:
                self.proc.wait(timeout=CLOSE_GRACE_S)
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(self.proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                self.proc.wait()
            if channel is not None:  # a body generation it created after our close (it held the turn: growing at
                channel.unlink()     # its handshake, e.g. when another instance failed to start)
        if self._log is not None:
            self._log.close()
            self._log = None

    @property
    def returncode(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    def __enter__(self) -> "BridgeEnv":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


def not_started(command: str, exc: OSError) -> SimulatorNotStarted:
    """The error for a simulator command that cannot be started, with the fix."""
    where = f" (relative to the working folder {os.getcwd()})" if not os.path.isabs(command) and os.sep in command else ""
    if isinstance(exc, FileNotFoundError):
        what = f"was not found{where}" if os.sep in command else "was not found on PATH"
        fix = "give the path of the simulator's executable, e.g. --env \"bridge:./build/my_sim --fast\""
    elif isinstance(exc, PermissionError):
        what, fix = f"is not executable{where}", f"make it executable (chmod +x {command}) or name its interpreter"
    else:
        what, fix = f"could not be started{where}: {exc.strerror or exc}", "check the command"
    return SimulatorNotStarted(f"the simulator command {command!r} {what}: {fix}")


def describe_exit(code: int) -> str:
    """A process's return code in words: "exited with code 3", "was killed by signal 9 (SIGKILL)"."""
    if code >= 0:
        return f"exited with code {code}"
    try:
        name = f" ({signal.Signals(-code).name})"
    except ValueError:
        name = ""
    return f"was killed by signal {-code}{name}"


def attach_prompt(path: Path) -> str:
    """Where an attaching trainer waits, and how to start the example simulator against it."""
    return (f"relayrl bridge: waiting for a simulator to attach to {path}; start yours with --memory-path {path}, "
            f"e.g. python -m relayrl.bridge.examples.ball3d --memory-path {path}")


def _lowest_allowed(views: L.SectionViews, n: int) -> np.ndarray:
    """[n, B]: the lowest option each row's mask allows in each branch (0 where the simulator forbade
    them all)."""
    if not views.masks:
        return np.zeros((n, 0), np.int32)
    return np.stack([np.argmin(mask[:n], axis=1) for mask in views.masks], axis=1).astype(np.int32)


__all__ = ["BridgeEnv", "DecisionSteps", "TerminalSteps"]
