"""The simulator side of the bridge in Python: a world of agents grouped by behaviour.

    world = World(behaviours=[dict(name="ball", max_agents=12, observations=[(6,)], continuous=2)])
    while True:                                       # (--memory-path is read from the command line)
        for agent in agents:
            world.request_decision("ball", agent.id).set_observation(0, agent.obs()).set_reward(agent.reward)
        status = world.step()                         # hand the turn over, block until the actions
        if status == "closed":
            break
        if status == "reset":
            ...                                       # restart every agent, then request decisions again
            continue
        for agent_id, (continuous, discrete) in world.actions("ball").items():
            ...

Every observation of every agent in a turn must be set: ``step()`` refuses a row with one missing
rather than send the previous occupant's data. Many agents: ``set_decisions(name, ids, [obs arrays],
rewards)`` writes a whole block at once, and ``action_arrays(name)`` returns (ids, continuous [n, C],
discrete [n, B]). ``register`` adds a behaviour (or more agents) mid-run. A simulator busy on purpose
in its own turn for longer than the trainer's timeout (loading a level) calls ``keep_alive()`` now
and then, so the trainer does not take it for stuck. ``world.stats.record("goals", 1.0, aggregation="sum")``
sends a named scalar to the trainer's metrics (``sim/goals``, protocol §3.1) with the next ``step()``.
"""

from __future__ import annotations

import sys
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np

from relayrl.bridge import layout as L
from relayrl.bridge.channel import BridgeError, Channel
from relayrl.bridge.sidechannel import SideChannel, SideChannels, StatsRecorder

OK, RESET, CLOSED = "ok", "reset", "closed"


def memory_path_from_args(argv: Sequence[str] | None = None) -> str | None:
    """The value of ``--memory-path PATH`` (or ``--memory-path=PATH``) in ``argv``."""
    argv = list(sys.argv[1:] if argv is None else argv)
    for i, arg in enumerate(argv):
        if arg == "--memory-path" and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith("--memory-path="):
            return arg.split("=", 1)[1]
    return None


def behaviour_spec(name: str, max_agents: int, observations: Sequence[Any], continuous: int = 0,
                   branches: Sequence[int] = ()) -> L.BehaviourSpec:
    """A BehaviourSpec from ``register``'s arguments: observations are ObsSpecs, shapes, or (shape,
    dtype) pairs (float32 or uint8)."""
    obs = tuple(o if isinstance(o, L.ObsSpec)
                else L.ObsSpec(tuple(o[0]), np.dtype(o[1])) if len(o) == 2 and isinstance(o[0], (tuple, list))
                else L.ObsSpec(tuple(o)) for o in observations)
    return L.BehaviourSpec(name, max_agents, obs, continuous, tuple(branches))


def _resized(array: np.ndarray, n: int) -> np.ndarray:
    out = np.zeros((n, *array.shape[1:]), array.dtype)
    out[:len(array)] = array
    return out


class _Rows:
    """One behaviour's staged rows for the next hand-over (a decision or a termination block)."""

    def __init__(self, spec: L.BehaviourSpec, final: bool):
        n = spec.max_agents
        self.spec, self.final, self.count = spec, final, 0
        self.obs = [np.zeros((n, *o.shape), o.dtype) for o in spec.observations]
        self.filled = np.zeros((n, len(spec.observations)), bool)  # which observations each row has set
        self.reward = np.zeros(n, np.float32)
        self.ids = np.zeros(n, np.int64)
        self.extra = np.zeros(n, bool) if final else np.zeros((n, spec.mask_width), bool)  # interrupted | masks
        self.bulk: tuple | None = None
        self.rows: dict[int, int] = {}

    def grow(self, spec: L.BehaviourSpec) -> None:
        """More agents, registered mid-turn: in place, so the rows requested so far (and the builders
        pointing at them) stay valid, as in the C SDK."""
        n, self.spec = spec.max_agents, spec
        self.obs = [_resized(o, n) for o in self.obs]
        self.filled, self.reward, self.ids, self.extra = (_resized(a, n) for a in (self.filled, self.reward,
                                                                                     self.ids, self.extra))

    def add(self, agent_id: int) -> int:
        if self.bulk is not None:
            raise BridgeError(f"behaviour {self.spec.name!r}: set_decisions/set_terminations and per-agent calls "
                              "cannot be mixed in one turn")
        if agent_id in self.rows:
            raise BridgeError(f"agent {agent_id} of {self.spec.name!r} is already in this turn's block")
        if self.count >= self.spec.max_agents:
            raise BridgeError(f"behaviour {self.spec.name!r} has max_agents={self.spec.max_agents}: agent "
                              f"{agent_id} is one too many (register it with more)")
        row, self.count = self.count, self.count + 1
        self.rows[agent_id] = row
        self.ids[row] = agent_id
        self.reward[row] = 0.0
        self.extra[row] = False
        self.filled[row] = False  # the previous occupant's observations are not this agent's
        return row

    def check_filled(self) -> None:
        """Refuse to send a row with an observation left unset: it would hold an earlier agent's data."""
        filled = self.filled[:self.count]
        if filled.all():  # every step, per behaviour: the usual case stays one reduction
            return
        row, k = (int(i) for i in np.argwhere(~filled)[0])
        what = "ended episode" if self.final else "decision request"
        raise BridgeError(f"the {what} of agent {int(self.ids[row])} of {self.spec.name!r} has no observation "
                          f"{k}: call .set_observation({k}, value) for each of the behaviour's "
                          f"{len(self.spec.observations)} observations of every agent before world.step()")

    def clear(self) -> None:
        self.count, self.bulk, self.rows = 0, None, {}


class DecisionBuilder:
    def __init__(self, rows: _Rows, row: int):
        self._rows, self._row = rows, row

    def set_observation(self, index: int, value: Any) -> "DecisionBuilder":
        rows = self._rows
        if not 0 <= index < len(rows.obs):
            raise BridgeError(f"behaviour {rows.spec.name!r} has observations 0..{len(rows.obs) - 1}, not {index}")
        try:
            rows.obs[index][self._row] = value
        except (ValueError, TypeError) as exc:
            raise BridgeError(f"observation {index} of {rows.spec.name!r} has shape {rows.obs[index].shape[1:]}, "
                              f"got a value of shape {np.shape(value)} ({exc})") from None
        rows.filled[self._row, index] = True
        return self

    def set_reward(self, reward: float) -> "DecisionBuilder":
        self._rows.reward[self._row] = reward
        return self

    def set_action_mask(self, branch: int, forbidden: Iterable[int]) -> "DecisionBuilder":
        """Forbid options of one discrete branch for this agent (all are allowed unless forbidden)."""
        spec = self._rows.spec
        if not 0 <= branch < len(spec.branches):
            raise BridgeError(f"behaviour {spec.name!r} has {len(spec.branches)} discrete branches: there is no "
                              f"branch {branch}")
        size, options = spec.branches[branch], [int(o) for o in forbidden]
        bad = [o for o in options if not 0 <= o < size]
        if bad:  # an unchecked index would forbid an option of the next branch
            raise BridgeError(f"branch {branch} of {spec.name!r} has options 0..{size - 1}: cannot forbid {bad}")
        start = sum(spec.branches[:branch])
        for option in options:
            self._rows.extra[self._row, start + option] = True
        return self


class TerminationBuilder(DecisionBuilder):
    def set_action_mask(self, branch: int, forbidden: Iterable[int]) -> "DecisionBuilder":
        raise BridgeError("an ended episode takes no action mask")


class World:
    """The simulator's end of a bridge channel (see the module docstring)."""

    def __init__(self, memory_path: str | None = None, *, behaviours: Iterable[L.BehaviourSpec | Mapping] = (),
                 timeout_s: float = 60.0, spin_us: float = 500.0, side_channels: Iterable[SideChannel] = (),
                 argv: Sequence[str] | None = None):
        """Attach to the trainer's channel (``memory_path``, else ``--memory-path`` from ``argv`` or the
        command line) and register ``behaviours``: BehaviourSpec objects or dicts of ``register``'s
        arguments. ``timeout_s`` bounds every wait for the trainer; ``spin_us`` the busy-wait before
        sleeping (0: none)."""
        path = memory_path or memory_path_from_args(argv)
        if path is None:
            raise BridgeError("no --memory-path given: the trainer passes it when it launches the simulator "
                              "(or pass World(memory_path=...) to attach to a waiting trainer)")
        specs = [_as_spec(b) for b in behaviours]  # a mistake is reported before the trainer is kept waiting
        self.stats = StatsRecorder()  # world.stats.record(name, value, aggregation): sim/<name> in the metrics
        self.side_channels = SideChannels([self.stats, *side_channels])
        self.specs: list[L.BehaviourSpec] = []
        self._decisions: dict[str, _Rows] = {}
        self._terminations: dict[str, _Rows] = {}
        self._views: dict[str, L.SectionViews] = {}
        self._generation = 0  # of the body the views point into
        self._sent: dict[str, np.ndarray] = {}  # agent ids of the decision rows handed over
        self._layout_dirty = True
        self._reset_handlers: list[Callable[[], None]] = []
        for spec in specs:
            self._add(spec)
        self.channel = Channel.attach(path, timeout_s=timeout_s, spin_us=spin_us)
        self.channel.handshaken = True  # the trainer is there: it created the channel
        self.stats.enabled = self.channel.trainer_version >= L.STATS_VERSION  # a 1.0/1.1 trainer takes no stats

    # ---- behaviours
    def register(self, name: str, max_agents: int, observations: Sequence[Any], continuous: int = 0,
                 branches: Sequence[int] = ()) -> L.BehaviourSpec:
        """A behaviour added mid-run (``World(behaviours=...)`` declares those known at start);
        ``observations`` are shapes or (shape, dtype) pairs (float32 or uint8). It is sent with the next
        ``step()``. Registering a known name again with a larger ``max_agents`` (same everything else)
        grows it, keeping the rows already requested this turn."""
        return self._add(behaviour_spec(name, max_agents, observations, continuous, branches))

    def _add(self, spec: L.BehaviourSpec) -> L.BehaviourSpec:
        name = spec.name
        known = next((i for i, s in enumerate(self.specs) if s.name == name), None)
        if known is None:
            self.specs.append(spec)
            self._decisions[name] = _Rows(spec, final=False)
            self._terminations[name] = _Rows(spec, final=True)
        else:
            old = self.specs[known]
            if (old.observations, old.continuous, old.branches) != (spec.observations, spec.continuous, spec.branches):
                raise BridgeError(f"behaviour {name!r} is already registered with another spec")
            if spec.max_agents <= old.max_agents:
                return old
            self.specs[known] = spec
            self._decisions[name].grow(spec)
            self._terminations[name].grow(spec)
        self._layout_dirty = True
        return spec

    def on_reset(self, handler: Callable[[], None]) -> None:
        self._reset_handlers.append(handler)

    # ---- keep-alive (protocol §4.1)
    def keep_alive(self) -> None:
        """Tell the waiting trainer this simulator is alive and busy on purpose (its turn takes long: a
        level loading, a slow frame), so it restarts its timeout. One store; call it at least every
        ``trainer_timeout_s / 4`` while busy (calling it every frame is fine). Harmless at any time."""
        self.channel.keep_alive()

    @property
    def trainer_timeout_s(self) -> float:
        """How long the trainer waits for this simulator's turn (0.0: no timeout, or a 1.0 trainer)."""
        return self.channel.peer_timeout_s

    # ---- this turn's rows
    def request_decision(self, behaviour: str, agent_id: int) -> DecisionBuilder:
        rows = self._rows(self._decisions, behaviour)
        return DecisionBuilder(rows, rows.add(int(agent_id)))

    def end_episode(self, behaviour: str, agent_id: int, interrupted: bool = False) -> TerminationBuilder:
        rows = self._rows(self._terminations, behaviour)
        row = rows.add(int(agent_id))
        rows.extra[row] = interrupted
        return TerminationBuilder(rows, row)

    def interrupt_episode(self, behaviour: str, agent_id: int) -> TerminationBuilder:
        return self.end_episode(behaviour, agent_id, interrupted=True)

    def set_decisions(self, behaviour: str, agent_ids: np.ndarray, observations: Sequence[np.ndarray],
                      rewards: np.ndarray, masks: np.ndarray | None = None) -> None:
        """A whole decision block: ids [n], one [n, *shape] array per observation, rewards [n],
        masks [n, sum(branches)] (True = forbidden). Copied into the shared memory at ``step()``."""
        self._bulk(self._decisions, behaviour, agent_ids, observations, rewards, masks)

    def set_terminations(self, behaviour: str, agent_ids: np.ndarray, observations: Sequence[np.ndarray],
                         rewards: np.ndarray, interrupted: np.ndarray | None = None) -> None:
        self._bulk(self._terminations, behaviour, agent_ids, observations, rewards, interrupted)

    def _bulk(self, blocks: dict[str, _Rows], behaviour: str, ids, observations, rewards, extra) -> None:
        rows = self._rows(blocks, behaviour)
        spec, n = rows.spec, len(ids)
        if rows.count:
            raise BridgeError(f"behaviour {behaviour!r}: per-agent calls and a whole block cannot be mixed in one turn")
        if n > spec.max_agents:
            raise BridgeError(f"{n} agents for {behaviour!r}, registered with max_agents={spec.max_agents}")
        if len(observations) != len(spec.observations):
            raise BridgeError(f"{behaviour!r} has {len(spec.observations)} observations, got {len(observations)}")
        for k, (array, obs) in enumerate(zip(observations, spec.observations)):
            if np.shape(array) != (n, *obs.shape):
                raise BridgeError(f"observation {k} of {behaviour!r} has shape {np.shape(array)}, expected "
                                  f"{(n, *obs.shape)}")
        rows.bulk = (np.asarray(ids), list(observations), np.asarray(rewards), extra)

    def _rows(self, blocks: dict[str, _Rows], behaviour: str) -> _Rows:
        try:
            return blocks[behaviour]
        except KeyError:
            raise BridgeError(f"behaviour {behaviour!r} is not registered: call world.register first") from None

    # ---- turns
    def step(self) -> str:
        """Write this turn's blocks and side-channel messages, hand over, and wait for the trainer.
        Returns "ok" (actions are ready), "reset" (the trainer asked for a reset: reset handlers have
        run; request fresh decisions and step again) or "closed" (the trainer closed normally).
        Raises BridgeError when the trainer died, timed out or the channel is corrupt."""
        channel = self.channel
        if channel.closed:
            return CLOSED
        for spec in self.specs:  # before anything is written: a refused step leaves the turn as it was
            self._decisions[spec.name].check_filled()
            self._terminations[spec.name].check_filled()
        if self._layout_dirty:
            self._relayout()
        for spec in self.specs:
            self._write(spec.name)
        while True:
            channel.write_side(self.side_channels.outgoing())
            channel.hand_over()
            try:
                channel.wait_turn()
            except BridgeError as exc:
                if getattr(exc, "reason", None) == L.NORMAL:
                    return CLOSED
                raise
            channel.sync_body()
            if channel.generation != self._generation:  # the trainer grew the body: views moved
                self._map_views(trainers=True)
            reset, query = channel.flag(L.OFF_RESET), channel.flag(L.OFF_QUERY)
            if reset and query:
                raise channel._fail("the trainer set both reset and query in one turn (the protocol forbids it, §5)")
            incoming = channel.read_side()
            try:
                L.decode_records(incoming)  # the framing is checked before any handler sees a record
            except L.LayoutError as exc:
                raise channel._fail(f"the trainer's side-channel records do not parse: {exc}") from None
            self.side_channels.dispatch(incoming)
            if query:
                channel.set_flag(L.OFF_QUERY, 0)
                continue
            for rows in (*self._decisions.values(), *self._terminations.values()):
                rows.clear()
            if reset:
                channel.set_flag(L.OFF_RESET, 0)
                self._sent = {}
                for handler in self._reset_handlers:
                    handler()
                return RESET
            return OK

    def actions(self, behaviour: str) -> dict[int, tuple[np.ndarray, np.ndarray]]:
        """Each deciding agent's (continuous [C], discrete [B]) actions of the last turn (copies)."""
        ids, continuous, discrete = self.action_arrays(behaviour)
        return {int(i): (continuous[row].copy(), discrete[row].copy()) for row, i in enumerate(ids)}

    def action_arrays(self, behaviour: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(agent ids [n], continuous [n, C], discrete [n, B]): views valid until the next ``step()``."""
        ids = self._sent.get(behaviour, np.zeros(0, np.int64))
        views = self._views[behaviour]
        return ids, views.continuous[:len(ids)], views.discrete[:len(ids)]

    def _relayout(self) -> None:
        """Rewrite the RL region for the current specs, in a new generation when the size changed."""
        channel = self.channel
        size = L.rl_size(self.specs)
        if size != channel.rl:
            channel.grow(channel.side, size, keep_rl=False)
        body, at = channel.body, channel.side
        body[at:at + 8] = np.array([len(self.specs), 0], "<u4").tobytes()
        at += 8
        for spec in self.specs:
            section = L.layout(spec, at)
            head = L.encode_spec(spec, section.size)
            body[at:at + len(head)] = head
            at += section.size
        self._map_views()
        self._layout_dirty = False

    def _map_views(self, trainers: bool = False) -> None:
        """Views of the current body; ``trainers``: the trainer made it (it grew its side channel), so
        its RL region must be ours, copied verbatim (§7): anything else is a protocol error."""
        channel = self.channel
        body, self._generation = channel.body, channel.generation
        try:
            views = L.section_views(body, channel.side, channel.rl)
        except L.LayoutError as exc:
            if not trainers:
                raise
            raise channel._fail(f"the trainer's body generation {channel.generation} changed the RL region: {exc}") \
                from None
        if trainers and [v.section.spec for v in views.values()] != self.specs:
            raise channel._fail(f"the trainer's body generation {channel.generation} changed the RL region (it "
                                f"holds behaviours {list(views)}, this simulator registered "
                                f"{[s.name for s in self.specs]})")
        self._views = views

    def _write(self, name: str) -> None:
        views = self._views[name]
        for rows, final in ((self._decisions[name], False), (self._terminations[name], True)):
            obs_out = views.final_obs if final else views.obs
            ids_out = views.final_ids if final else views.ids
            reward_out = views.final_reward if final else views.reward
            if rows.bulk is not None:
                ids, observations, rewards, extra = rows.bulk
            else:
                n = rows.count
                ids, observations, rewards = rows.ids[:n], [o[:n] for o in rows.obs], rows.reward[:n]
                extra = rows.extra[:n]
            n = len(ids)
            for out, array in zip(obs_out, observations):
                np.copyto(out[:n], array, casting="unsafe")
            reward_out[:n] = rewards
            ids_out[:n] = ids
            if final:
                views.interrupted[:n] = False if extra is None else extra
                views.final_counts[0] = n
            else:
                views.mask[:n] = False if extra is None else np.asarray(extra, bool)
                views.counts[0] = n
                self._sent[name] = np.array(ids, np.int64)

    def close(self) -> None:
        self.channel.close()

    def __enter__(self) -> "World":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _as_spec(behaviour: L.BehaviourSpec | Mapping) -> L.BehaviourSpec:
    if isinstance(behaviour, L.BehaviourSpec):
        return behaviour
    if isinstance(behaviour, Mapping):
        try:
            return behaviour_spec(**behaviour)
        except TypeError as exc:
            raise BridgeError(f"behaviour {dict(behaviour)!r}: {exc}; give name, max_agents, observations and "
                              "continuous and/or branches, as World.register takes them") from None
    raise BridgeError(f"World(behaviours=...) takes BehaviourSpec objects or dicts of register()'s arguments, "
                      f"not {type(behaviour).__name__}")
