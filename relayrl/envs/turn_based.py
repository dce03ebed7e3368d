"""PettingZoo turn-based (AEC) games as a ``BehaviourEnv`` (``relayrl/envs/agents.py``): every player is a
behaviour with a policy of its own, and only the player to move decides.

    env = TurnBasedEnv([tictactoe_v3.env] * 4)     # behaviours: player_1, player_2
    turns = env.reset(seed=0)                      # {player: AgentTurn}
    while training:
        turns = env.step({p: policies[p].act_masked(t.obs, "collect", t.action_mask).env_action
                          for p, t in turns.items()})

or, through ``run_behaviours`` (``turn_based_envs`` builds the training and the evaluation env; this is
what ``relayrl train --env pettingzoo:pettingzoo.classic.tictactoe_v3:env`` does)::

    run_behaviours(config, *turn_based_envs(config))

How PettingZoo's AEC API maps onto the ``AgentTurn`` of each player:

- **Ids.** The id of a player's row is the index of its env copy: a copy has one agent per player, and the
  id is reused by the copy's next game (an agent that ended an episode and began the next).
- **Deciders.** Every copy has one player to move (``env.agent_selection``); its row is in that player's
  ``ids``, the other players of the copy are absent. Each ``step`` makes one move in every copy.
- **Rewards.** A player's ``reward`` is what ``env.last()`` gives it when it is to move: PettingZoo's
  reward accumulated since the player's previous move, the other players' moves in between included; at an
  episode's end, its ``end_reward`` likewise (a loss caused by the opponent's winning move reaches the
  loser there).
- **Ends.** When a player is terminated or truncated (the classic games end both at once), it is in
  ``end_ids`` with its final observation and reward; ``interrupted`` = truncated, not terminated. Its dead
  step (``step(None)``) is made here. A copy whose agents are all gone resets itself (without a seed: it
  continues its generator), and the next game's first mover decides in the same turn.
- **Observations and masks** (``relayrl/envs/agentobs.py``, as for ParallelEnvs). The classic games'
  Dict ``{"observation", "action_mask"}`` gives the mask (True = allowed) as ``AgentTurn.action_mask``
  and the observation as the row. A Box observation other than a uint8 image is flattened to float32 (a
  board of int8 planes, ``[3, 3, 2]`` for tictactoe, becomes 18 floats for the MLP); uint8 images stay as
  they are (the CNN takes them), and several entries are packed into one row (``PackedDict``).
- **Actions.** Each is checked against its space and its mover's mask: a forbidden action is one EnvError.
  A player left out of ``step`` gets the default answer: its lowest allowed action in every branch (0.0
  for a Box), as the bridge's.

Players may have spaces of their own (each is a behaviour). ``stats`` counts ``games`` (games finished).
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

import gymnasium as gym
import numpy as np

from relayrl.envs.agentobs import AgentObservations
from relayrl.envs.agents import AgentTurn, Behaviour, BehaviourEnv
from relayrl.envs.masks import allowed_all, branch_sizes
from relayrl.envs.multiagent import PettingZooCopies, is_turn_based_env, pettingzoo_env_function
from relayrl.envs.packed import PackedDict
from relayrl.envs.vector import ActionSpec, check_actions
from relayrl.errors import ConfigError, EnvError

__all__ = ["TurnBasedEnv", "turn_based_envs", "is_turn_based", "game_factory"]


class _Player:
    """One player's observations, masks and actions: rows of its behaviour."""

    def __init__(self, name: str, observation_space: gym.Space, action_space: gym.Space, copies: int):
        if not isinstance(action_space, (gym.spaces.Discrete, gym.spaces.MultiDiscrete, gym.spaces.Box)):
            raise EnvError(f"player {name!r} has the action space {action_space}: turn-based games take Discrete, "
                           "MultiDiscrete or Box actions")
        self.name, self.action_space = name, action_space
        self.view = AgentObservations(observation_space, action_space, name)
        space = self.view.space
        image = len(space.shape or ()) == 3 and space.dtype == np.uint8  # (the CNN's pictures)
        self.flat = isinstance(space, gym.spaces.Box) and not isinstance(space, PackedDict) and not image
        if self.flat:
            space = gym.spaces.Box(np.asarray(space.low, np.float32).reshape(-1),
                                   np.asarray(space.high, np.float32).reshape(-1), dtype=np.float32)
        self.behaviour = Behaviour(space, action_space, copies)
        self.spec = ActionSpec(action_space)

    def rows(self, values: list[Any]) -> np.ndarray:
        rows = self.view.rows(values)
        if not self.flat:
            return rows
        return rows.reshape(len(values), *self.behaviour.observation_space.shape).astype(np.float32)

    def masks(self, masks: list[np.ndarray | None]) -> np.ndarray | None:
        """[n, width] masks of the deciding rows (a row without one allows everything), or None without masks."""
        if not self.view.masked:
            return None
        out = allowed_all(self.action_space, len(masks))
        for row, mask in enumerate(masks):
            if mask is not None:
                out[row] = mask
        return out

    def default(self, mask: np.ndarray | None) -> Any:
        """The lowest allowed action (of every branch), 0.0 in a Box."""
        space = self.action_space
        if isinstance(space, gym.spaces.Box):
            return np.clip(np.zeros(space.shape, space.dtype), space.low, space.high)
        sizes, start = branch_sizes(space), np.asarray(space.start)
        picks, offset = [], 0
        for size in sizes:
            picks.append(int(np.argmax(mask[offset:offset + size])) if mask is not None else 0)
            offset += size
        picks = np.asarray(picks, np.int64) + start
        return picks[0] if isinstance(space, gym.spaces.Discrete) else picks

    def allowed(self, action: np.ndarray, mask: np.ndarray | None) -> bool:
        if mask is None or isinstance(self.action_space, gym.spaces.Box):
            return True
        picks = np.atleast_1d(action) - np.atleast_1d(self.action_space.start)
        offsets = np.cumsum((0, *branch_sizes(self.action_space)[:-1]))
        return bool(mask[offsets + picks].all())

    def to_env(self, action: np.ndarray) -> Any:
        return int(action) if isinstance(self.action_space, gym.spaces.Discrete) else np.asarray(action)


class TurnBasedEnv(PettingZooCopies, BehaviourEnv):
    """Copies of a PettingZoo turn-based AEC env, a behaviour per player (module docstring)."""

    what = "a turn-based env"

    def _setup(self) -> None:
        first = self.envs[0]
        names = list(first.possible_agents)
        if not names:
            raise EnvError("the env declares no possible_agents")
        for i, env in enumerate(self.envs):
            if not is_turn_based_env(env):
                raise EnvError(f"env copy {i} is {type(env).__name__}, not a turn-based PettingZoo AEC env: "
                               "TurnBasedEnv steps AEC envs whose metadata does not say is_parallelizable; train a "
                               "ParallelEnv with relayrl.envs.multiagent.MultiAgentVectorEnv")
            if list(env.possible_agents) != names:
                raise EnvError(f"env copy {i} has the players {list(env.possible_agents)}, unlike copy 0's {names}: "
                               "every copy must be the same game")
        copies = len(self.envs)
        self.players = {name: _Player(name, first.observation_space(name), first.action_space(name), copies)
                        for name in names}
        self.behaviours = {name: player.behaviour for name, player in self.players.items()}
        self._mover: list[str | None] = [None] * copies  # per copy: the player to move
        self._row: list[Any] = [None] * copies  # per copy: the mover's row value (AgentObservations.row)
        self._mask: list[np.ndarray | None] = [None] * copies
        self._reward = np.zeros(copies, np.float32)
        self._deciders: dict[str, list[int]] | None = None  # the copies each player decides in, in the last turn
        self._ends: dict[str, list[tuple[int, Any, float, bool]]] = {name: [] for name in names}
        self.games = 0

    @property
    def stats(self) -> dict[str, int]:
        return {"games": self.games}

    def _settle(self, i: int) -> None:
        """Make the dead steps of copy ``i``'s ended players (keeping their ends), reset it once its agents are all
        gone, and keep the player to move."""
        env, resets = self.envs[i], 0
        while True:
            if not env.agents:
                if resets:
                    raise EnvError(f"env copy {i}: its game ended again before any move after reset(): nothing "
                                   "would ever decide in it")
                self._reset_copy(i, None)
                self.games, resets = self.games + 1, resets + 1
                continue
            agent = env.agent_selection
            if agent not in self.players:
                raise EnvError(f"env copy {i}: agent {agent!r} is to move but is not in possible_agents "
                               f"{list(self.players)}: PettingZoo envs must declare every agent they may create")
            obs, reward, terminated, truncated, info = env.last()
            if terminated or truncated:
                self._ends[agent].append((i, self.players[agent].view.row(obs), float(reward), not terminated))
                env.step(None)  # its dead step: PettingZoo removes the agent
                continue
            player = self.players[agent]
            self._mover[i], self._reward[i] = agent, float(reward)
            self._row[i] = player.view.row(obs)
            self._mask[i] = player.view.mask(obs, info, f"player {agent!r} of env copy {i}")
            return

    def _reset_copy(self, i: int, seed: int | None) -> None:
        self.envs[i].reset(seed=seed)
        if not self.envs[i].agents:
            raise EnvError(f"env copy {i} has no agents after reset(): nothing would ever decide in it")

    def _turns(self) -> dict[str, AgentTurn]:
        self._deciders = {name: [] for name in self.players}
        for i, mover in enumerate(self._mover):
            self._deciders[mover].append(i)
        turns = {}
        for name, player in self.players.items():
            rows, ends = self._deciders[name], self._ends[name]
            turns[name] = AgentTurn(
                ids=np.array(rows, np.int64),
                obs=player.rows([self._row[i] for i in rows]),
                reward=self._reward[rows],
                end_ids=np.array([e[0] for e in ends], np.int64),
                end_obs=player.rows([e[1] for e in ends]),
                end_reward=np.array([e[2] for e in ends], np.float32),
                interrupted=np.array([e[3] for e in ends], bool),
                action_mask=player.masks([self._mask[i] for i in rows]))
            self._ends[name] = []
        return turns

    def reset(self, seed: int | None = None) -> dict[str, AgentTurn]:
        """Reset every copy (copy ``i`` with ``seed + i``); each copy's first mover decides."""
        for ends in self._ends.values():
            ends.clear()
        for i in range(len(self.envs)):
            self._reset_copy(i, None if seed is None else seed + i)
            self._settle(i)
        return self._turns()

    def step(self, actions: Mapping[str, np.ndarray]) -> dict[str, AgentTurn]:
        """One move in every copy: ``actions[player]`` has a row per id of that player's last turn; a player left
        out gets its lowest allowed actions. The next turn of every player."""
        if self._deciders is None:
            raise EnvError("step() before reset(): call reset(seed) first")
        unknown = [name for name in actions if name not in self.players]
        if unknown:
            raise EnvError(f"actions for {unknown}, which are not players of this game (its players: "
                           f"{list(self.players)})")
        moves: dict[int, Any] = {}
        for name, rows in self._deciders.items():
            player = self.players[name]
            if name not in actions:
                for i in rows:
                    moves[i] = player.to_env(player.default(self._mask[i]))
                continue
            chosen = check_actions(player.spec, actions[name], len(rows))
            for i, action in zip(rows, chosen):
                if not player.allowed(action, self._mask[i]):
                    allowed = np.flatnonzero(self._mask[i]).tolist()
                    raise EnvError(f"player {name!r} of env copy {i} chose action {action.tolist()}, which its "
                                   f"action mask forbids (allowed: {allowed}): act with the turn's action_mask "
                                   "(policy.act_masked)")
                moves[i] = player.to_env(action)
        for i, env in enumerate(self.envs):
            env.step(moves[i])
            self._settle(i)
        return self._turns()


def game_factory(env_id: str, kwargs: Mapping[str, Any]) -> Callable[[], Any]:
    """A function returning one copy of the game ``env_id`` ("pettingzoo:package.module:env_fn") made with
    ``kwargs`` (a run's ``env.kwargs``: ``behaviour``, which names a player's policy in its checkpoints, is
    not the game's)."""
    make_env = pettingzoo_env_function(env_id)
    kwargs = {k: v for k, v in kwargs.items() if k != "behaviour"}
    return lambda: make_env(**kwargs)


def is_turn_based(env_id: str, kwargs: Mapping[str, Any]) -> bool:
    """Whether the PettingZoo env ``env_id`` is a turn-based game (one copy is made, and closed, to see)."""
    env = game_factory(env_id, kwargs)()
    try:
        return is_turn_based_env(env)
    finally:
        env.close()


def turn_based_envs(config: Any, evaluation: bool = True) -> tuple[TurnBasedEnv, TurnBasedEnv | None]:
    """The training and evaluation envs of a run on a turn-based PettingZoo game (``config.env.id``, a
    ``pettingzoo:`` id): ``config.env.num_envs`` copies, and ``min(config.eval.num_envs, config.eval.episodes)``
    for evaluation (none with ``evaluation=False``). ``run_behaviours`` trains a policy per player on them;
    a self-play trainer takes them as they are (the players are its two sides)."""
    env = config.env
    ignored = {"env.max_episode_steps": env.max_episode_steps, "env.frame_stack": (env.frame_stack or 1) > 1 or None,
               "env.manager": env.manager if env.manager in ("subproc", "async", "native") else None,
               "env.resize": env.resize, "env.grayscale": env.grayscale or None,
               "env.kwargs.behaviour": env.kwargs.get("behaviour")}
    ignored = [key for key, value in ignored.items() if value is not None]
    if ignored:
        raise ConfigError(f"{', '.join(ignored)} do not apply to a turn-based PettingZoo game ({env.id}: its copies "
                          "step in this process, as the env function makes them, and every player trains): drop them")
    factory = game_factory(env.id, env.kwargs)
    train_env = TurnBasedEnv([factory] * env.num_envs)
    if not evaluation:
        return train_env, None
    try:
        return train_env, TurnBasedEnv([factory] * min(config.eval.num_envs, config.eval.episodes))
    except BaseException:
        train_env.close()
        raise
