"""PettingZoo ParallelEnvs for tests of ``relayrl/envs/multiagent.py``: one whose agents come and go, and
cooperative ones that a shared policy learns quickly (``relay_team``: agents join and leave, vector or image
observations, also as an AEC env; what ``relayrl train ppo --env pettingzoo:relayrl.testing.multiagent_envs:
relay_team`` trains on; ``masked_pick``: Dict observations with action masks, counting forbidden actions;
``hybrid_echo``: a hybrid action space, continuous values and a discrete branch)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
from pettingzoo.utils.env import ParallelEnv


class _SharedSpaces(ParallelEnv):
    """Every agent has the same spaces (``_obs_space``, ``_act_space``, set by the subclass)."""

    _obs_space: gym.Space
    _act_space: gym.Space

    def observation_space(self, agent):
        return self._obs_space

    def action_space(self, agent):
        return self._act_space


class SpawningEnv(_SharedSpaces):
    """a_0 and a_1 start; a_2 appears after step 2; a_0 terminates at step 3; all truncate at ``length``.

    Observation: [agent number, step]; reward: the action taken.
    """

    metadata = {"name": "relayrl_spawning_v0"}

    def __init__(self, length: int = 5):
        self.length = length
        self.possible_agents = ["a_0", "a_1", "a_2"]
        self._obs_space = gym.spaces.Box(-np.inf, np.inf, (2,), np.float32)
        self._act_space = gym.spaces.Discrete(3)

    def _obs(self, agent):
        return np.array([int(agent[-1]), self.t], np.float32)

    def reset(self, seed=None, options=None):
        self.t = 0
        self.agents = ["a_0", "a_1"]
        return {a: self._obs(a) for a in self.agents}, {a: {} for a in self.agents}

    def step(self, actions):
        self.t += 1
        rewards = {a: float(actions[a]) for a in actions}
        terminated = {a: a == "a_0" and self.t == 3 for a in actions}
        truncated = {a: self.t >= self.length for a in actions}
        obs = {a: self._obs(a) for a in actions}
        infos = {a: {"t": self.t} for a in actions}
        self.agents = [a for a in self.agents if not (terminated[a] or truncated[a])]
        if self.t == 2:  # a newcomer gets an entry in every dict (PettingZoo's convention)
            self.agents.append("a_2")
            obs["a_2"], rewards["a_2"], terminated["a_2"], truncated["a_2"], infos["a_2"] = (
                self._obs("a_2"), 0.0, False, False, {})
        return obs, rewards, terminated, truncated, infos


class TeamMatchEnv(_SharedSpaces):
    """A cooperative task that a shared policy learns in seconds: every step each agent sees a target
    (one-hot of 3) and its own number (one-hot of 2); agent k should answer (target + k) % 3. Both
    agents get the team's reward, the fraction of agents that answered right, and the episode is
    truncated after ``length`` steps. Random play earns length / 3 per agent, perfect play length.
    """

    metadata = {"name": "relayrl_team_match_v0"}

    def __init__(self, length: int = 8):
        self.length = length
        self.possible_agents = ["a_0", "a_1"]
        self._obs_space = gym.spaces.Box(0.0, 1.0, (5,), np.float32)
        self._act_space = gym.spaces.Discrete(3)
        self._rng = np.random.default_rng()

    def _observe(self):
        obs = {}
        for k, agent in enumerate(self.agents):
            o = np.zeros(5, np.float32)
            o[self.target] = 1.0
            o[3 + k] = 1.0
            obs[agent] = o
        return obs

    def reset(self, seed=None, options=None):
        if seed is not None:
            self._rng = np.random.default_rng(seed)
        self.t, self.target = 0, int(self._rng.integers(3))
        self.agents = list(self.possible_agents)
        return self._observe(), {a: {} for a in self.agents}

    def step(self, actions):
        self.t += 1
        right = [int(actions[a]) == (self.target + k) % 3 for k, a in enumerate(self.possible_agents)]
        team = float(np.mean(right))
        self.target = int(self._rng.integers(3))
        done = self.t >= self.length
        obs = self._observe()
        rewards = {a: team for a in self.agents}
        terminated = {a: False for a in self.agents}
        truncated = {a: done for a in self.agents}
        infos = {a: {} for a in self.agents}
        if done:
            self.agents = []
        return obs, rewards, terminated, truncated, infos


class RelayTeamEnv(_SharedSpaces):
    """TeamMatchEnv's task with agents that join and leave: a_0 and a_1 start, a_2 joins after step 2, a_0
    terminates after step 5, and the rest are truncated after ``length`` steps. Each step every live agent k
    sees a target (one-hot of 3) and its own number (one-hot of 3) and should answer (target + k) % 3; each
    gets the team's reward, the fraction of live agents that answered right. Perfect play earns an agent one
    per step it lived (a_0 5, a_1 ``length``, a_2 ``length`` - 2), random play a third of that.

    ``image=True``: the same as a uint8 image [6, 7, 7], one plane per one-hot entry (255 where it is 1).
    """

    metadata = {"name": "relayrl_relay_team_v0", "is_parallelizable": True}
    render_mode = None

    def __init__(self, length: int = 8, image: bool = False):
        self.length, self.image = length, image
        self.possible_agents = ["a_0", "a_1", "a_2"]
        self._obs_space = (gym.spaces.Box(0, 255, (6, 7, 7), np.uint8) if image
                           else gym.spaces.Box(0.0, 1.0, (6,), np.float32))
        self._act_space = gym.spaces.Discrete(3)
        self._rng = np.random.default_rng()

    def _observe(self, agents):
        obs = {}
        for agent in agents:
            o = np.zeros(6, np.float32)
            o[self.target] = 1.0
            o[3 + int(agent[-1])] = 1.0
            obs[agent] = (np.broadcast_to(o[:, None, None] * 255, (6, 7, 7)).astype(np.uint8) if self.image else o)
        return obs

    def reset(self, seed=None, options=None):
        if seed is not None:
            self._rng = np.random.default_rng(seed)
        self.t, self.target = 0, int(self._rng.integers(3))
        self.agents = ["a_0", "a_1"]
        return self._observe(self.agents), {a: {} for a in self.agents}

    def step(self, actions):
        self.t += 1
        right = [int(actions[a]) == (self.target + int(a[-1])) % 3 for a in self.agents]
        team = float(np.mean(right))
        self.target = int(self._rng.integers(3))
        acted = list(self.agents)
        terminated = {a: a == "a_0" and self.t == 5 for a in acted}
        truncated = {a: self.t >= self.length and not terminated[a] for a in acted}
        rewards = {a: team for a in acted}
        self.agents = [a for a in acted if not (terminated[a] or truncated[a])]
        if self.t == 2 and self.t < self.length:  # a newcomer gets an entry in every dict (PettingZoo's convention)
            self.agents.append("a_2")
            rewards["a_2"], terminated["a_2"], truncated["a_2"] = 0.0, False, False
        obs = self._observe([*acted, *[a for a in self.agents if a not in acted]])
        return obs, rewards, terminated, truncated, {a: {} for a in obs}


class MaskedPickEnv(_SharedSpaces):
    """Dict observations with action masks: agents a_0 and a_1 see a target (Discrete(5)) and their own number
    (Discrete(2)); agent k should answer (target + k) % 5. Each step its mask allows two actions, the right one
    and a random other, so random allowed play earns 1/2 per step and perfect play 1. A forbidden action costs
    1 and is counted in ``MaskedPickEnv.forbidden_taken`` (per process). Episodes are truncated after ``length``
    steps.

    ``mask_in``: "obs" (the ``action_mask`` entry of the Dict, as PettingZoo's classic games) or "info" (each
    agent's ``info["action_mask"]``; the Dict is then only ``target`` and ``agent``). ``mask_width`` other than 5
    gives masks of that width (and declares it, with "obs"). ``extra_key``: a rank-2 int16 Box ``board`` beside
    the others, which no built-in encoder takes.
    """

    metadata = {"name": "relayrl_masked_pick_v0", "is_parallelizable": True}
    render_mode = None
    forbidden_taken = 0  # forbidden actions taken, in this process
    N = 5

    def __init__(self, length: int = 8, mask_in: str = "obs", mask_width: int = 5, extra_key: bool = False):
        self.length, self.mask_in, self.mask_width, self.extra_key = length, mask_in, mask_width, extra_key
        self.possible_agents = ["a_0", "a_1"]
        keys = {"target": gym.spaces.Discrete(self.N), "agent": gym.spaces.Discrete(2)}
        if extra_key:
            keys["board"] = gym.spaces.Box(0, 3, (3, 3), np.int16)
        if mask_in == "obs":
            keys["action_mask"] = gym.spaces.Box(0, 1, (mask_width,), np.int8)
        self._obs_space = gym.spaces.Dict(keys)
        self._act_space = gym.spaces.Discrete(self.N)
        self._rng = np.random.default_rng()

    def _draw(self):
        self.target = int(self._rng.integers(self.N))
        self.masks = {}
        for k, agent in enumerate(self.possible_agents):
            mask = np.zeros(self.N, np.int8)
            right = (self.target + k) % self.N
            mask[[right, (right + 1 + int(self._rng.integers(self.N - 1))) % self.N]] = 1
            self.masks[agent] = mask[:self.mask_width] if self.mask_width < self.N else mask

    def _out(self):
        obs, infos = {}, {}
        for k, agent in enumerate(self.agents):
            obs[agent] = {"target": self.target, "agent": k}
            if self.extra_key:
                obs[agent]["board"] = np.zeros((3, 3), np.int16)
            if self.mask_in == "obs":
                obs[agent]["action_mask"] = self.masks[agent]
            infos[agent] = {"action_mask": self.masks[agent].astype(bool)} if self.mask_in == "info" else {}
        return obs, infos

    def reset(self, seed=None, options=None):
        if seed is not None:
            self._rng = np.random.default_rng(seed)
        self.t, self.agents = 0, list(self.possible_agents)
        self._draw()
        return self._out()

    def step(self, actions):
        self.t += 1
        rewards = {}
        for k, agent in enumerate(self.agents):
            action = int(actions[agent])
            if not self.masks[agent][action]:
                MaskedPickEnv.forbidden_taken += 1
                rewards[agent] = -1.0
            else:
                rewards[agent] = float(action == (self.target + k) % self.N)
        self._draw()
        obs, infos = self._out()
        done = self.t >= self.length
        terminated = {a: False for a in self.agents}
        truncated = {a: done for a in self.agents}
        if done:
            self.agents = []
        return obs, rewards, terminated, truncated, infos


def masked_pick(length: int = 8, mask_in: str = "obs", mask_width: int = 5, extra_key: bool = False) -> MaskedPickEnv:
    """``--env pettingzoo:relayrl.testing.multiagent_envs:masked_pick`` (``env.kwargs``: as ``MaskedPickEnv``)."""
    return MaskedPickEnv(length, mask_in, mask_width, extra_key)


def relay_team(length: int = 8, image: bool = False) -> RelayTeamEnv:
    """``--env pettingzoo:relayrl.testing.multiagent_envs:relay_team`` (``env.kwargs``: length, image)."""
    return RelayTeamEnv(length, image)


class HybridEchoEnv(_SharedSpaces):
    """Two agents with a hybrid action space (relayrl/envs/hybrid.py): Tuple((Box(-1, 1, (2,)), MultiDiscrete([3]))).
    Each observes the action it was given last, [continuous 0, continuous 1, discrete]; reward
    1 - |c0 - 0.5| + (discrete == 2); episodes of ``length`` steps. An action that is not a (continuous [2],
    discrete [1] int) tuple, as the space samples it, is an AssertionError."""

    metadata = {"name": "relayrl_hybrid_echo_v0"}

    def __init__(self, length: int = 6):
        self.length = length
        self.possible_agents = ["a_0", "a_1"]
        self._obs_space = gym.spaces.Box(-np.inf, np.inf, (3,), np.float32)
        self._act_space = gym.spaces.Tuple((gym.spaces.Box(-1.0, 1.0, (2,), np.float32), gym.spaces.MultiDiscrete([3])))

    def reset(self, seed=None, options=None):
        self.t, self.agents = 0, list(self.possible_agents)
        return {a: np.zeros(3, np.float32) for a in self.agents}, {a: {} for a in self.agents}

    def step(self, actions):
        self.t += 1
        obs, rewards = {}, {}
        for agent, action in actions.items():
            assert isinstance(action, tuple) and len(action) == 2, action
            continuous, discrete = action
            assert continuous.shape == (2,) and discrete.shape == (1,) and discrete.dtype.kind == "i", action
            obs[agent] = np.array([*continuous, discrete[0]], np.float32)
            rewards[agent] = 1.0 - abs(float(continuous[0]) - 0.5) + float(discrete[0] == 2)
        done = self.t >= self.length
        infos = {a: {} for a in actions}
        terminated, truncated = {a: False for a in actions}, {a: done for a in actions}
        if done:
            self.agents = []
        return obs, rewards, terminated, truncated, infos


def hybrid_echo(length: int = 6) -> HybridEchoEnv:
    """``--env pettingzoo:relayrl.testing.multiagent_envs:hybrid_echo`` (``env.kwargs``: length)."""
    return HybridEchoEnv(length)


def relay_team_aec(length: int = 8):
    """The same env as PettingZoo's AEC API (``aec_to_parallel`` converts it back)."""
    from pettingzoo.utils.conversions import parallel_to_aec

    return parallel_to_aec(RelayTeamEnv(length))


def not_an_env():
    """Returns something that is not a PettingZoo env (tests of the refusal)."""
    return object()
