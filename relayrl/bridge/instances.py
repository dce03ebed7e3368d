"""Several copies of one simulator, or one attached editor, offered as one ``BridgeEnv``.

``BridgeInstances`` launches N copies of a simulator command, each on its own channel, and joins
their agents: ``get_steps(name)`` holds every instance's rows one after the other (instance 0's
first), ``set_actions`` splits the rows back. Each turn is handed to every instance before waiting
for any (``BridgeEnv.send_step`` then ``receive``), so the simulators step in parallel.

Agent ids: with one instance, the simulator's own ids; with N, ``instance << ID_BITS | local id``
(a simulator's ids must then lie in [0, 2**ID_BITS)), so ids are unique across instances and
``global_id >> ID_BITS`` says which instance an agent lives in.

A launched instance that dies (``PeerDied``: its process exited or was killed) is restarted: the
warning names its exit code or signal, the agents it had end their episodes as interrupted
(truncated, with the last observation seen and reward 0) in the next turn, and the new copy's
fresh decisions (it is reset first, after the side-channel settings sent so far) join that same
turn. The others keep running. Past ``max_restarts`` restarts in all, the run stops with the death's
``PeerDied`` (exit 3). With ``attach=True`` there is one instance, the simulator a user starts by
hand at the editor path: when it closes normally or dies (the editor left play mode), the trainer
creates the editor channel again and waits up to ``timeout_s`` for the next one to attach (no limit
on their number; ``bridge_attaches`` counts them).
"""

from __future__ import annotations

import logging
import threading
import uuid
from dataclasses import replace
from typing import Iterable, Sequence

import numpy as np

from relayrl.bridge import layout as L
from relayrl.bridge.env import BridgeEnv, DecisionSteps, TerminalSteps
from relayrl.bridge.errors import BridgeClosed, BridgeError, PeerDied
from relayrl.bridge.sidechannel import SideChannel

log = logging.getLogger(__name__)

ID_BITS = 40


class _Relay(SideChannel):
    """An instance's copy of one of the caller's side channels: incoming messages reach the caller's."""

    def __init__(self, target: SideChannel):
        super().__init__(target.channel_id)
        self.target = target

    def on_message(self, payload: bytes) -> None:
        self.target.on_message(payload)


class _Live:
    """The agents of one behaviour of one instance whose episodes are running, with their last
    observation: what ends as interrupted if the instance dies."""

    def __init__(self):
        self.ids = np.zeros(0, np.int64)
        self.obs: list[np.ndarray] | None = None

    def update(self, decisions: DecisionSteps, ends: TerminalSteps) -> None:
        if np.array_equal(self.ids, decisions.agent_id):  # the usual case: the same agents decide again
            self.obs = decisions.obs
            return
        if self.obs is None:
            self.obs = [o[:0] for o in decisions.obs]
        keep = ~np.isin(self.ids, np.concatenate([decisions.agent_id, ends.agent_id]))
        self.ids = np.concatenate([self.ids[keep], decisions.agent_id])
        self.obs = [np.concatenate([o[keep], d]) for o, d in zip(self.obs, decisions.obs)]

    def interrupted(self) -> TerminalSteps | None:
        if self.obs is None or not len(self.ids):
            return None
        n = len(self.ids)
        return TerminalSteps(self.obs, np.zeros(n, np.float32), np.ones(n, bool), self.ids)


class BridgeInstances:
    """``count`` copies of ``command`` (or, with ``attach=True``, the one simulator that attaches at
    the editor path) behind ``BridgeEnv``'s interface: ``behaviours``, ``reset()``, ``step()``,
    ``get_steps(name)``, ``set_actions(name, continuous=, discrete=)``, ``close()``. ``side_channels``
    are the caller's: every instance gets what is queued on them (a restarted one, everything sent so
    far) and their handlers receive every instance's messages. ``instances[k]`` is instance k's
    ``BridgeEnv``."""

    def __init__(self, command: str | Sequence[str] | None = None, count: int = 1, *, attach: bool = False,
                 args: Sequence[str] = (), timeout_s: float = 60.0, spin_us: float = 500.0,
                 side_channels: Iterable[SideChannel] = (), max_restarts: int = 3, directory=None,
                 stop: threading.Event | None = None):
        if attach and count != 1:
            raise BridgeError("attach mode waits for one simulator (the editor's): use one instance")
        if count < 1:
            raise BridgeError(f"the number of simulator instances must be at least 1, not {count}")
        self.command, self.count, self.attach = command, count, attach
        self._options = dict(args=list(args), timeout_s=timeout_s, spin_us=spin_us, directory=directory)
        self._stop = stop  # ends the wait for an attaching simulator (BridgeEnv)
        self.max_restarts = max_restarts
        self.restarts = self.attaches = 0
        self._channels = list(side_channels)
        self._sent: list[tuple[uuid.UUID, bytes]] = []  # every side-channel message so far, for a restarted instance
        self._relays: list[list[_Relay]] = []
        self.instances: list[BridgeEnv] = []
        self._specs: dict[str, L.BehaviourSpec] = {}
        self._specs_key: tuple = ()
        self._launches = 0  # BridgeEnvs created so far
        self._turns: list[dict[str, tuple[DecisionSteps, TerminalSteps]]] = [{} for _ in range(count)]
        self._live: list[dict[str, _Live]] = [{} for _ in range(count)]
        self._ended: list[dict[str, TerminalSteps]] = [{} for _ in range(count)]
        try:
            for k in range(count):  # launch them all, then wait for their handshakes
                self.instances.append(self._launch(k, handshake=False))
            for k, instance in enumerate(self.instances):
                try:
                    instance.handshake()
                except BridgeError as exc:
                    raise self._named(exc, k) from None
                self._snapshot(k)
        except BaseException:
            self.close()
            raise

    # ---- what the simulators offer
    @property
    def behaviours(self) -> dict[str, L.BehaviourSpec]:
        """Each behaviour's spec, ``max_agents`` summed over the instances that have it."""
        key = (self._launches, *(instance.channel.generation for instance in self.instances))
        if key != self._specs_key:  # (an instance's behaviours change only with its body's generation)
            specs: dict[str, L.BehaviourSpec] = {}
            for instance in self.instances:
                for name, spec in instance.behaviours.items():
                    specs[name] = replace(spec, max_agents=specs[name].max_agents + spec.max_agents) \
                        if name in specs else spec
            self._specs, self._specs_key = specs, key
        return self._specs

    @property
    def stats(self) -> dict[str, int]:
        return {"bridge_attaches": self.attaches} if self.attach else {"bridge_restarts": self.restarts}

    @property
    def memory_paths(self) -> list:
        return [instance.memory_path for instance in self.instances]

    def get_steps(self, behaviour: str) -> tuple[DecisionSteps, TerminalSteps]:
        """Every instance's decisions and terminations of ``behaviour`` (copies), instance 0's first;
        the interrupted ends of a restarted instance's agents come before its new copy's ends."""
        if behaviour not in self.behaviours:
            raise BridgeError(f"no behaviour {behaviour!r} in the simulator; it has {sorted(self.behaviours)}")
        decisions, ends = [], []
        for k in range(self.count):
            turn = self._turns[k].get(behaviour)
            ended = self._ended[k].get(behaviour)
            if ended is not None:
                ends.append(self._global(k, ended))
            if turn is not None:
                decisions.append(self._global(k, turn[0]))
                ends.append(self._global(k, turn[1]))
        if len(decisions) == 1 and len(ends) == 1:
            return decisions[0], ends[0]
        cat = np.concatenate
        return (DecisionSteps([cat(o) for o in zip(*(d.obs for d in decisions))], cat([d.reward for d in decisions]),
                              cat([d.agent_id for d in decisions]),
                              [cat(m) for m in zip(*(d.action_mask for d in decisions))]),
                TerminalSteps([cat(o) for o in zip(*(t.obs for t in ends))], cat([t.reward for t in ends]),
                              cat([t.interrupted for t in ends]), cat([t.agent_id for t in ends])))

    def set_actions(self, behaviour: str, continuous: np.ndarray | None = None,
                    discrete: np.ndarray | None = None) -> None:
        """Actions for the rows of ``get_steps(behaviour)``'s decisions, in that order."""
        start = 0
        total = sum(len(t[behaviour][0]) for t in self._turns if behaviour in t)
        for kind, value in (("continuous", continuous), ("discrete", discrete)):
            if value is not None and len(np.asarray(value)) != total:
                raise BridgeError(f"{kind} actions for {behaviour!r} have {len(np.asarray(value))} rows, expected "
                                  f"{total}: one row per deciding agent of every instance")
        for k, instance in enumerate(self.instances):
            if behaviour not in self._turns[k]:
                continue
            n = len(self._turns[k][behaviour][0])
            part = slice(start, start + n)
            start += n
            instance.set_actions(behaviour, continuous=None if continuous is None else np.asarray(continuous)[part],
                                 discrete=None if discrete is None else np.asarray(discrete)[part])

    # ---- turns
    def step(self) -> None:
        """Every instance's turn at once: hand each its actions, then wait for all of them."""
        self._turn(BridgeEnv.send_step)

    def reset(self) -> None:
        """Reset every instance (at once); every running episode is dropped, as for one simulator."""
        self._live = [{} for _ in range(self.count)]
        self._turn(BridgeEnv.send_reset)

    def _turn(self, send) -> None:
        self._fan_out()
        self._ended = [{} for _ in range(self.count)]
        for instance in self.instances:
            send(instance)
        for k, instance in enumerate(self.instances):
            try:
                instance.receive()
            except (PeerDied, BridgeClosed) as exc:
                if not self._restartable(exc):
                    raise self._named(exc, k) from None
                self._restart(k, exc)
                continue
            self._snapshot(k)

    def _restartable(self, exc: BridgeError) -> bool:
        if self.attach:  # the editor left play mode (closed normally) or was closed (died)
            return isinstance(exc, PeerDied) or exc.reason == L.NORMAL
        return isinstance(exc, PeerDied)

    def _restart(self, k: int, exc: BridgeError) -> None:
        ended = {name: t for name, live in self._live[k].items() if (t := live.interrupted()) is not None}
        agents = sum(len(t) for t in ended.values())
        self.instances[k].close()
        if self.attach:
            self.attaches += 1
            log.warning("bridge: the attached simulator went away (%s); its %d agents' episodes end as interrupted; "
                        "waiting for the next one to attach", exc, agents)
        else:
            self.restarts += 1
            if self.restarts > self.max_restarts:
                raise type(exc)(f"{self._named(exc, k)} (after {self.max_restarts} restarts, env.max_restarts): fix "
                                "the simulator, or raise env.max_restarts") from None
            log.warning("bridge: %s; restarting it (restart %d of at most %d, env.max_restarts); its %d agents' "
                        "episodes end as interrupted", self._named(exc, k), self.restarts, self.max_restarts, agents)
        self._turns[k], self._live[k] = {}, {}
        try:
            self.instances[k] = self._launch(k, handshake=True)
            self.instances[k].reset()  # the settings sent so far, and fresh episodes
        except BridgeError as error:
            raise self._named(error, k) from None
        self._ended[k] = ended
        self._snapshot(k)

    # ---- instances
    def _launch(self, k: int, handshake: bool) -> BridgeEnv:
        self._launches += 1
        relays = [_Relay(channel) for channel in self._channels]
        by_id = {relay.channel_id: relay for relay in relays}
        for channel_id, payload in self._sent:  # a restarted instance: everything its predecessor got
            by_id[channel_id].queue(payload)
        if k < len(self._relays):
            self._relays[k] = relays
        else:
            self._relays.append(relays)
        if self.attach:
            return BridgeEnv(attach=True, side_channels=relays, handshake=handshake, stop=self._stop,
                             **{key: v for key, v in self._options.items() if key != "args"})
        return BridgeEnv(self.command, side_channels=relays, handshake=handshake, **self._options)

    def _fan_out(self) -> None:
        """What the caller queued on its side channels goes to every instance."""
        for i, channel in enumerate(self._channels):
            for payload in channel.outgoing:
                self._sent.append((channel.channel_id, payload))
                for relays in self._relays:
                    relays[i].queue(payload)
            channel.outgoing.clear()

    def _snapshot(self, k: int) -> None:
        instance = self.instances[k]
        turn = {}
        for name in instance.behaviours:
            decisions, ends = instance.get_steps(name)
            turn[name] = decisions.copy(), ends.copy()
            self._live[k].setdefault(name, _Live()).update(*turn[name])
        self._turns[k] = turn

    def _global(self, k: int, steps):
        """``steps`` with instance k's ids made unique across instances (module docstring)."""
        if self.count == 1:
            return steps
        ids = steps.agent_id
        if len(ids) and (ids.min() < 0 or ids.max() >= 1 << ID_BITS):
            raise BridgeError(f"simulator instance {k} uses agent id {int(ids.max() if ids.max() >= 0 else ids.min())}: "
                              f"with several instances, agent ids must lie in [0, 2**{ID_BITS})")
        return replace(steps, agent_id=ids + (k << ID_BITS))

    def _named(self, exc: BridgeError, k: int) -> BridgeError:
        """``exc`` with the instance it came from, when there are several."""
        if self.count == 1:
            return exc
        message = f"simulator instance {k} of {self.count}: {exc}"
        if isinstance(exc, BridgeClosed):
            return BridgeClosed(message, exc.reason)
        return type(exc)(message)

    # ---- closing
    def close(self) -> None:
        """Close every instance (each waits up to 5 s for its simulator, then kills it)."""
        for instance in self.instances:
            instance.close()

    def __enter__(self) -> "BridgeInstances":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


__all__ = ["BridgeInstances", "ID_BITS"]
