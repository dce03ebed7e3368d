"""PettingZoo ParallelEnvs as an agent env (``relayrl/envs/agents.py``): every live agent of one or
more env copies is a row, and one shared policy acts for all of them.

    venv = MultiAgentVectorEnv([my_module.parallel_env] * 4)
    turn = venv.reset(seed=0)                      # AgentTurn
    while training:
        turn = venv.step(policy.act(turn.obs, "collect").env_action)   # one action per id in turn.ids

or, through the Trainer (``multiagent_envs`` builds the training and the evaluation env)::

    run_trainer(config, experience=AgentExperience(*multiagent_envs(config, my_module.parallel_env)))

How PettingZoo's parallel API maps onto an ``AgentTurn``:

- **Ids.** Agent ``name`` of env copy ``i`` is id ``offset(i) + possible_agents.index(name)``
  (``offset(i)`` = the possible agents of the copies before it): stable while the agent lives, and
  *reused* when the same name comes back, later in the episode or in the copy's next episode. Two
  live agents never share an id (a copy has one live agent per name), and the collectors see a
  returning agent as one that ended an episode and began the next, which is the contract. The
  evaluator's per-agent quotas rely on that reuse. A name outside ``possible_agents`` is refused.
- **Deciders.** Every live agent decides every step (``env.agents``, in that order, copy after
  copy); ``reward`` is the one of the step it answers, 0 for an agent that just appeared.
- **Ends.** An agent that is terminated or truncated, or that leaves ``env.agents`` without either
  (counted as truncated), is in ``end_ids`` with its final observation and last reward;
  ``interrupted`` = not terminated.
- **Autoreset.** A copy whose agents are all gone is reset in place (without a seed: it continues
  its generator); its new agents are deciders in the same turn.
- **Observations and masks** (``relayrl/envs/agentobs.py``). An ``AgentTurn`` holds one array of rows,
  so a Dict or Tuple observation is packed into one uint8 row (``PackedDict``, as ``relayrl.envs.make``
  packs a single-agent env's). A Dict's ``action_mask`` entry (PettingZoo classic's convention), or an
  agent's ``info["action_mask"]``, is that agent's action mask (True = allowed), checked where it enters
  (an EnvError naming the agent and copy for a wrong width or no allowed action); the observation is then
  the one entry left, as it is, or the entries left, packed. ``AgentTurn.action_mask`` holds a row per
  decider once the env gives masks (rows of agents without one allow everything), and the collectors
  act, store and learn with it as the single-agent managers' masks.
- **Hybrid actions** (``Tuple((Box, MultiDiscrete))``, relayrl/envs/hybrid.py: PPO, APPO, A2C): one [C + B]
  row per agent in, each agent's ``(continuous, discrete)`` tuple to the env.

Every agent must have the same observation and action space. ``stats`` counts ``resets`` (copies
reset after their agents were all gone). Turn-based AEC envs (one agent acting at a time: PettingZoo's
classic board games) are refused by ``pettingzoo_factory`` (``aec_to_parallel`` cannot step them):
``relayrl/envs/turn_based.py`` steps them, a behaviour per player, and ``relayrl train`` trains a policy each.

From the command line the env is an id, ``"pettingzoo:package.module:env_fn"`` (``relayrl train ppo
--env pettingzoo:pettingzoo.butterfly.cooperative_pong_v6:parallel_env``): ``pettingzoo_factory``
imports the module, and ``env_fn(**env.kwargs)`` must return a ParallelEnv, or an AEC env that
PettingZoo can convert (``aec_to_parallel``: its metadata says ``is_parallelizable``), or a turn-based
AEC env (``is_turn_based_env``; ``relayrl.launch`` then trains it through ``turn_based_envs``). ``env.resize``
and ``env.grayscale`` shrink every agent's image observations (``agent_env_factory``; envs/imageobs.py).
"""

from __future__ import annotations

import inspect
from typing import Any, Callable

import gymnasium as gym
import numpy as np

from relayrl.envs.agentobs import AgentObservations
from relayrl.envs.agents import AgentEnv, AgentTurn
from relayrl.envs.masks import allowed_all
from relayrl.envs.hybrid import hybrid_layout
from relayrl.envs.vector import ActionSpec, check_actions
from relayrl.errors import ConfigError, EnvError, RelayRLError, install_hint
from relayrl.usercode import describe, import_module

__all__ = ["MultiAgentVectorEnv", "multiagent_envs", "agent_env_factory", "pettingzoo_factory", "is_pettingzoo",
           "pettingzoo_env_function", "is_turn_based_env", "PREFIX"]

PREFIX = "pettingzoo:"
ID_FORM = '"pettingzoo:package.module:env_fn" (env_fn returns a PettingZoo ParallelEnv)'


def is_pettingzoo(env_id: str) -> bool:
    """Whether ``env_id`` names a PettingZoo env (``"pettingzoo:package.module:env_fn"``)."""
    return env_id.startswith(PREFIX)


class PettingZooCopies:
    """Copies of a PettingZoo env made by ``factories``, checked by ``_setup`` and closed together (a copy that fails
    to build, or a check that fails, closes those built)."""

    what = "a PettingZoo env"

    def __init__(self, factories: list[Callable[[], Any]]):
        if not factories:
            raise EnvError(f"{self.what} needs at least one env copy")
        self.envs: list[Any] = []
        try:
            for factory in factories:
                self.envs.append(factory())
            self._setup()
        except BaseException:
            self.close()
            raise

    def _setup(self) -> None:
        """Check the copies and read what the env needs from them."""

    def close(self) -> None:
        for env in self.envs:
            env.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class MultiAgentVectorEnv(PettingZooCopies, AgentEnv):
    """PettingZoo ParallelEnv copies as one agent env (see module docstring)."""

    what = "a multi-agent vector env"

    def _setup(self) -> None:
        first = self.envs[0]
        agents = list(first.possible_agents)
        if not agents:
            raise EnvError("the env declares no possible_agents")
        self.single_observation_space = first.observation_space(agents[0])
        self.single_action_space = first.action_space(agents[0])
        self._ids: list[dict[str, int]] = []
        for env in self.envs:
            offset = sum(len(ids) for ids in self._ids)
            self._ids.append({agent: offset + k for k, agent in enumerate(env.possible_agents)})
            for agent in env.possible_agents:
                if env.observation_space(agent) != self.single_observation_space or \
                        env.action_space(agent) != self.single_action_space:
                    raise EnvError(f"agent {agent!r} has spaces {env.observation_space(agent)} / "
                                   f"{env.action_space(agent)}, unlike {agents[0]!r}: one shared policy needs "
                                   "the same observation and action space for every agent")
        self._view = AgentObservations(self.single_observation_space, self.single_action_space, agents[0])
        self.single_observation_space = self._view.space
        # a hybrid action (envs/hybrid.py): one [C + B] row per agent in, (continuous, discrete) to the env
        self._hybrid = hybrid_layout(self.single_action_space)
        self._action_spec = ActionSpec(self.single_action_space if self._hybrid is None else
                                       gym.spaces.Box(-np.inf, np.inf, (self._hybrid.width,), np.float32))
        self._discrete = isinstance(self.single_action_space, gym.spaces.Discrete)
        self.num_envs = sum(len(ids) for ids in self._ids)  # the most agents at once
        self._obs: list[dict[str, Any]] = [{} for _ in self.envs]  # per copy: agent -> its row (AgentObservations.row)
        self._mask: list[dict[str, np.ndarray | None]] = [{} for _ in self.envs]  # per copy: agent -> its mask
        self._rows: list[tuple[int, str]] | None = None  # who decides now: (copy, name), in turn order
        self.resets = 0

    @property
    def stats(self) -> dict[str, int]:
        return {"resets": self.resets}

    def _id(self, i: int, agent: str) -> int:
        try:
            return self._ids[i][agent]
        except KeyError:
            raise EnvError(f"env copy {i} has agent {agent!r}, which is not in its possible_agents "
                           f"{list(self.envs[i].possible_agents)}: PettingZoo envs must declare every agent "
                           "they may create") from None

    def _take(self, i: int, agent: str, obs: dict[str, Any], infos: dict[str, Any]) -> None:
        """Agent ``agent`` of copy ``i`` decides on ``obs[agent]`` next: keep its row value and mask."""
        self._obs[i][agent] = self._view.row(obs[agent])
        self._mask[i][agent] = self._view.mask(obs[agent], infos.get(agent), f"agent {agent!r} of env copy {i}")

    def _reset_copy(self, i: int, seed: int | None) -> None:
        obs, infos = self.envs[i].reset(seed=seed)
        agents = list(self.envs[i].agents)
        if not agents:
            raise EnvError(f"env copy {i} has no agents after reset(): nothing would ever decide in it")
        missing = [a for a in agents if a not in obs]
        if missing:
            raise EnvError(f"env copy {i}: reset() returned no observation for agents {missing}")
        self._obs[i], self._mask[i] = {}, {}
        for agent in agents:
            self._id(i, agent)
            self._take(i, agent, obs, infos or {})

    def _turn(self, reward: dict[tuple[int, str], float], ends: list[tuple[int, str, Any, float, bool]]) -> AgentTurn:
        self._rows = [(i, agent) for i, env in enumerate(self.envs) for agent in env.agents]
        return AgentTurn(
            ids=np.array([self._id(i, a) for i, a in self._rows], np.int64),
            obs=self._view.rows([self._obs[i][a] for i, a in self._rows]),
            reward=np.array([reward.get(row, 0.0) for row in self._rows], np.float32),
            end_ids=np.array([self._id(i, a) for i, a, *_ in ends], np.int64),
            end_obs=self._view.rows([e[2] for e in ends]),
            end_reward=np.array([e[3] for e in ends], np.float32),
            interrupted=np.array([e[4] for e in ends], bool),
            action_mask=self._masks() if self._view.masked else None)

    def _masks(self) -> np.ndarray:
        """[n, width] masks of the deciding rows; a row whose agent gave none allows everything."""
        out = allowed_all(self.single_action_space, len(self._rows))
        for row, (i, agent) in enumerate(self._rows):
            mask = self._mask[i].get(agent)
            if mask is not None:
                out[row] = mask
        return out

    def reset(self, seed: int | None = None) -> AgentTurn:
        """Reset every copy (copy ``i`` with ``seed + i``); every agent decides."""
        for i in range(len(self.envs)):
            self._reset_copy(i, None if seed is None else seed + i)
        return self._turn({}, [])

    def step(self, actions: np.ndarray) -> AgentTurn:
        """Actions for the ids of the previous turn, in its order; the next turn."""
        if self._rows is None:
            raise EnvError("step() before reset(): call reset(seed) first")
        rows = self._rows
        actions = check_actions(self._action_spec, actions, len(rows))
        if self._hybrid is not None:
            actions = list(zip(*self._hybrid.split(actions)))
        per_env: list[dict[str, Any]] = [{} for _ in self.envs]
        for (i, agent), action in zip(rows, actions):
            per_env[i][agent] = int(action) if self._discrete else action
        reward: dict[tuple[int, str], float] = {}
        ends: list[tuple[int, str, Any, float, bool]] = []
        for i, env in enumerate(self.envs):
            if not per_env[i]:
                continue
            obs, rew, terminated, truncated, infos = env.step(per_env[i])
            infos = infos or {}
            live = list(env.agents)
            for agent in per_env[i]:
                term, trunc = bool(terminated.get(agent, False)), bool(truncated.get(agent, False))
                if term or trunc or agent not in live:
                    final = self._view.row(obs[agent]) if agent in obs else self._obs[i][agent]
                    ends.append((i, agent, final, float(rew.get(agent, 0.0)), not term))
                else:
                    reward[(i, agent)] = float(rew.get(agent, 0.0))
            if not live:  # every agent is gone: the episode of this copy is over
                self._reset_copy(i, None)
                self.resets += 1
                continue
            for agent in live:
                self._id(i, agent)
                if agent in obs:
                    self._take(i, agent, obs, infos)
                elif agent not in self._obs[i]:
                    raise EnvError(f"env copy {i}: agent {agent!r} appeared without an observation")
            for gone in [a for a in self._obs[i] if a not in live]:
                del self._obs[i][gone], self._mask[i][gone]
        return self._turn(reward, ends)


def pettingzoo_env_function(env_id: str) -> Callable[..., Any]:
    """The env function of ``"pettingzoo:package.module:env_fn"``, as a function returning what it returns: a
    ParallelEnv or an AEC env (anything else refused when it is called).

    The module and its attribute are checked here (an EnvError naming the id form otherwise); the keyword
    arguments and what the function returns when it is called.
    """
    reference = env_id[len(PREFIX):] if is_pettingzoo(env_id) else env_id
    module_name, _, name = reference.strip().rpartition(":")
    if not module_name or not name:
        raise EnvError(f"env id {env_id!r}: a PettingZoo env is named {ID_FORM}, e.g. "
                       "pettingzoo:pettingzoo.butterfly.cooperative_pong_v6:parallel_env")
    _require_pettingzoo()
    module = import_module(module_name, f"env id {env_id!r}", EnvError)
    env_fn = getattr(module, name, None)
    if not callable(env_fn):
        found = "has no attribute" if env_fn is None else "has a non-callable"
        raise EnvError(f"env id {env_id!r}: module {module_name!r} {found} {name!r}; name a function returning a "
                       f"ParallelEnv in {ID_FORM}")

    def make_env(**kwargs: Any) -> Any:
        from pettingzoo.utils.env import AECEnv, ParallelEnv

        try:
            inspect.signature(env_fn).bind(**kwargs)
        except TypeError as exc:
            raise EnvError(f"env id {env_id!r}: {name}(**{kwargs}) failed: {exc}; fix env.kwargs") from None
        except ValueError:  # no signature to check (a builtin)
            pass
        try:
            env = env_fn(**kwargs)
        except RelayRLError:
            raise
        except Exception as exc:  # noqa: BLE001 - user code may raise anything: one line naming it and where
            raise EnvError(f"env id {env_id!r}: {name}(**{kwargs}) raised {describe(exc)}: fix the env "
                           "function") from None
        if isinstance(env, (ParallelEnv, AECEnv)):
            return env
        raise EnvError(f"env id {env_id!r}: {name} returned {type(env).__name__}, not a PettingZoo ParallelEnv "
                       f"(or AEC env); name a function returning one in {ID_FORM}")

    make_env.__qualname__ = make_env.__name__ = name
    return make_env


def is_turn_based_env(env: Any) -> bool:
    """Whether ``env`` is a turn-based AEC env (one agent acts at a time: its metadata does not say
    ``is_parallelizable``), which ``relayrl.envs.turn_based.TurnBasedEnv`` steps, a policy per player."""
    from pettingzoo.utils.env import AECEnv

    return isinstance(env, AECEnv) and not env.metadata.get("is_parallelizable", False)


def pettingzoo_factory(env_id: str) -> Callable[..., Any]:
    """The env function of ``"pettingzoo:package.module:env_fn"``, as a function returning a ParallelEnv
    (``pettingzoo_env_function``'s checks): a ParallelEnv as it is, an AEC env converted by PettingZoo's
    ``aec_to_parallel``; a turn-based AEC env is refused (``TurnBasedEnv`` steps those)."""
    make_env = pettingzoo_env_function(env_id)
    name = make_env.__name__

    def make_parallel(**kwargs: Any) -> Any:
        from pettingzoo.utils.env import AECEnv

        env = make_env(**kwargs)
        if not isinstance(env, AECEnv):
            return env
        if is_turn_based_env(env):
            env.close()
            raise EnvError(f"env id {env_id!r}: {name} returned a turn-based AEC env (its metadata does not say "
                           "is_parallelizable: one agent acts at a time), which cannot be stepped as a parallel env "
                           "by one shared policy: train it with `relayrl train` (each player gets a policy of its "
                           "own) or step it with relayrl.envs.turn_based.TurnBasedEnv")
        from pettingzoo.utils.conversions import aec_to_parallel

        return aec_to_parallel(env)

    make_parallel.__qualname__ = make_parallel.__name__ = name
    return make_parallel


def _require_pettingzoo() -> None:
    try:
        import pettingzoo  # noqa: F401
    except ImportError:
        raise ConfigError("PettingZoo envs need the pettingzoo package, which is not installed: install relayrl's "
                          f"multiagent extra: {install_hint('multiagent')}") from None


def agent_env_factory(config: Any, env_fn: Callable[..., Any] | None = None) -> Callable[[], Any]:
    """A function returning one env copy: ``env_fn(**config.env.kwargs)`` (default: the env of ``config.env.id``)
    with ``env.resize`` / ``env.grayscale`` applied to every agent's observations (envs/imageobs.py)."""
    env_fn = pettingzoo_factory(config.env.id) if env_fn is None else env_fn
    kwargs, wrapping = dict(config.env.kwargs), config.env.wrapping()

    def factory() -> Any:
        from relayrl.envs.agentimages import wrap_agents  # (imports PettingZoo)

        return wrap_agents(env_fn(**kwargs), wrapping)

    return factory


def multiagent_envs(config: Any, env_fn: Callable[..., Any] | None = None,
                    evaluation: bool = True) -> tuple[MultiAgentVectorEnv, MultiAgentVectorEnv | None]:
    """The training and evaluation agent envs of a run (``relayrl.training.experience.AgentExperience``
    takes them): ``env_fn(**config.env.kwargs)`` returns one PettingZoo ParallelEnv (default: the env
    of ``config.env.id``, a ``pettingzoo:`` id); training steps ``config.env.num_envs`` copies,
    evaluation ``min(config.eval.num_envs, config.eval.episodes)`` (none with ``evaluation=False``)."""
    env = config.env
    ignored = {"env.max_episode_steps": env.max_episode_steps, "env.frame_stack": (env.frame_stack or 1) > 1 or None,
               "env.manager": env.manager if env.manager in ("subproc", "async", "native") else None}
    ignored = [key for key, value in ignored.items() if value is not None]
    if ignored:
        raise ConfigError(f"{', '.join(ignored)} do not apply to PettingZoo envs (their copies step in this process, "
                          "as the env function makes them): drop them, and end episodes or stack frames in the env")
    factory = agent_env_factory(config, env_fn)
    train_env = MultiAgentVectorEnv([factory] * config.env.num_envs)
    if not evaluation:
        return train_env, None
    try:
        return train_env, MultiAgentVectorEnv([factory] * min(config.eval.num_envs, config.eval.episodes))
    except BaseException:
        train_env.close()
        raise
