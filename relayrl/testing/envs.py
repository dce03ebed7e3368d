"""Small envs for tests and benchmarks, importable by worker processes.

Registered ids (``import relayrl.testing.envs`` registers them):
- ``relayrl-test/Faulty-v0``: counts steps; ``raise_at``, ``exit_at`` (os._exit), ``hang_at`` (sleep)
  make step number k misbehave; ``fail_reset`` makes every reset raise.
- ``relayrl-test/NanReward-v0``: rewards turn NaN after three steps (the env managers' reward check);
  ``HugeReward-v0``: finite rewards so large that a learner's loss overflows without reward normalisation
  (the non-finite loss guard).
- ``relayrl-test/Mistaken-v0``: an env that makes one of the mistakes of ``MistakenEnv``'s ``mistake``.
- ``relayrl-test/DictObs-v0``: Dict/Tuple observation of Box, Discrete, MultiBinary, MultiDiscrete.
- ``relayrl-test/SlowCartPole-v0``: CartPole-v1 with ``busy_us`` microseconds of busy-waiting per step
  (a costly env whose cost is CPU, like a physics simulator) and ``sleep_us`` of sleeping (a step
  that waits, like a robot); ``SlowPendulum-v0`` likewise.
- ``relayrl-test/DtypeObs-v0``: a Box observation of any ``dtype`` ("float64", "float32", "uint8", ...)
  and ``shape``, with ``actions`` "discrete" (Discrete(3), for DQN) or "box" (Box(-1, 1, (2,))).
- ``relayrl-test/ImageBandit-v0``: one-step episodes whose picture shows which action pays (a CNN's
  smallest learning task): ``size`` x ``size`` images of ``channels`` channels, first or last.
- ``relayrl-test/DictBandit-v0``: ImageBandit with a Dict observation: ``image`` (uint8), ``cue`` (float32
  vector) and ``noise`` (Discrete); in half the episodes the picture is dark and the cue tells the arm, so
  only a policy that reads both keys is right every time.
- ``relayrl-test/MirrorCartPole-v0``: CartPole-v1 whose env defines roadrunner's
  ``get_observation_mirror_indices()`` ([-0.1, -1, -2, -3]: every element negated) and
  ``get_action_mirror_indices()`` ([1, 0.1]: left and right swapped); ``mistake`` makes them wrong:
  "length", "range", "not_reflection", "no_action_method", "raises".
- ``relayrl-test/NoisyPendulum-v0``: Pendulum-v1 with a Dict observation: ``obs``, its [cos, sin, thetadot]
  plus Gaussian noise of sd ``noise`` times each component's bound (1, 1, 8), and ``state``, the clean
  observation (privileged critic inputs: ``ppo.critic_only_keys: [state]``); ``privileged=False``: ``obs`` only.
- ``relayrl-test/Start-v0``: an env whose reset reads ``options["start"]``: observation [position, start];
  each step moves the position by one; the episode ends after ``length`` steps. Any other options key makes
  reset raise TypeError, as a keyword argument the env does not take would.
"""

from __future__ import annotations

import os
import time
from typing import Any

import gymnasium as gym
from gymnasium.envs.classic_control import CartPoleEnv
import numpy as np


class FaultyEnv(gym.Env):
    """Observation = [env tag, step count]; reward 1; episode of ``length`` steps then truncated."""

    observation_space = gym.spaces.Box(-np.inf, np.inf, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, tag: int = 0, length: int = 10, raise_at: int | None = None, exit_at: int | None = None,
                 hang_at: int | None = None, hang_s: float = 30.0, fail_reset: bool = False):
        self.tag, self.length = tag, length
        self.raise_at, self.exit_at, self.hang_at, self.hang_s = raise_at, exit_at, hang_at, hang_s
        self.fail_reset = fail_reset
        self.t = 0
        self.total = 0  # steps since construction: faults trigger once per env instance

    def _obs(self) -> np.ndarray:
        return np.array([self.tag, self.t], np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        if self.fail_reset:
            raise RuntimeError("reset always fails")
        self.t = 0
        return self._obs(), {}

    def step(self, action):
        self.t += 1
        self.total += 1
        if self.total == self.raise_at:
            raise RuntimeError(f"injected failure at step {self.total}")
        if self.total == self.exit_at:
            os._exit(3)
        if self.total == self.hang_at:
            time.sleep(self.hang_s)
        return self._obs(), 1.0, False, self.t >= self.length, {}


class DictObsEnv(gym.Env):
    observation_space = gym.spaces.Dict({
        "pos": gym.spaces.Box(-1.0, 1.0, (3,), np.float64),
        "mode": gym.spaces.Discrete(4),
        "nested": gym.spaces.Tuple((gym.spaces.MultiBinary(5), gym.spaces.MultiDiscrete([3, 7]))),
    })
    action_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)

    def _obs(self):
        return {"pos": self.np_random.uniform(-1, 1, 3), "mode": int(self.t % 4),
                "nested": (self.np_random.integers(0, 2, 5).astype(np.int8),
                           np.array([self.t % 3, self.t % 7], dtype=np.int64))}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self._obs(), {}

    def step(self, action):
        self.t += 1
        return self._obs(), float(action.sum()), False, self.t >= 7, {"t": self.t}


class SlowCartPole(gym.Wrapper):
    base_id = "CartPole-v1"

    def __init__(self, busy_us: float = 200.0, sleep_us: float = 0.0):
        super().__init__(gym.make(self.base_id))
        self.busy_s, self.sleep_s = busy_us * 1e-6, sleep_us * 1e-6

    def step(self, action):
        if self.sleep_s:  # a step that waits without using the CPU, like a robot or a remote simulator
            time.sleep(self.sleep_s)
        end = time.perf_counter() + self.busy_s
        while time.perf_counter() < end:
            pass
        return self.env.step(action)


class SlowPendulum(SlowCartPole):
    """Pendulum-v1 with ``busy_us`` of busy-waiting per step (continuous actions, for SAC)."""

    base_id = "Pendulum-v1"


class NoisyPendulum(gym.Wrapper):
    """Pendulum-v1 whose actor-side observation is noisy and whose clean state is a second key (module docstring)."""

    def __init__(self, noise: float = 0.2, privileged: bool = True, **kwargs: Any):
        super().__init__(gym.make("Pendulum-v1", **kwargs))
        clean = self.env.observation_space
        self.scale = noise * clean.high.astype(np.float32)
        self.privileged = privileged
        keys = {"obs": gym.spaces.Box(-np.inf, np.inf, clean.shape, np.float32)}
        self.observation_space = gym.spaces.Dict({**keys, "state": clean} if privileged else keys)

    def _obs(self, state: np.ndarray) -> dict[str, np.ndarray]:
        noisy = state + self.scale * self.np_random.standard_normal(state.shape).astype(np.float32)
        obs = {"obs": noisy.astype(np.float32)}
        return {**obs, "state": state.astype(np.float32)} if self.privileged else obs

    def reset(self, *, seed=None, options=None):
        state, info = self.env.reset(seed=seed, options=options)
        return self._obs(state), info

    def step(self, action):
        state, reward, terminated, truncated, info = self.env.step(action)
        return self._obs(state), reward, terminated, truncated, info


class DtypeObsEnv(gym.Env):
    """Random observations of a given dtype and shape; the reward follows the action and the observation,
    so every loss has something finite to fit. Episodes terminate at random or are truncated at ``length``."""

    def __init__(self, dtype: str = "float64", shape: tuple[int, ...] = (5,), actions: str = "box", length: int = 20):
        self.dtype, self.length = np.dtype(dtype), length
        if self.dtype.kind in "iu":
            info = np.iinfo(self.dtype)
            self.observation_space = gym.spaces.Box(max(info.min, 0), min(info.max, 255), tuple(shape), self.dtype)
        else:
            self.observation_space = gym.spaces.Box(-1.0, 1.0, tuple(shape), self.dtype)
        if actions == "discrete":
            self.action_space: gym.Space = gym.spaces.Discrete(3)
        elif actions == "box":
            self.action_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
        else:
            raise ValueError(f"actions must be 'discrete' or 'box', got {actions!r}")
        self.t = 0

    def _obs(self) -> np.ndarray:
        return self.observation_space.sample()

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.observation_space.seed(int(self.np_random.integers(2**31)))
        self.t = 0
        self.obs = self._obs()
        return self.obs, {}

    def step(self, action):
        self.t += 1
        low, high = float(self.observation_space.low.flat[0]), float(self.observation_space.high.flat[0])
        first = (float(self.obs.flat[0]) - low) / (high - low)  # in [0, 1]
        if isinstance(self.action_space, gym.spaces.Discrete):
            reward = 1.0 if int(action) == int(first * 2.999) else 0.0
        else:
            reward = -float(np.square(np.asarray(action, np.float64) - (2 * first - 1)).sum())
        self.obs = self._obs()
        terminated = bool(self.np_random.random() < 0.05)
        return self.obs, reward, terminated, self.t >= self.length, {}


class ImageBandit(gym.Env):
    """One-step episodes: the picture shows which action pays.

    The image (``size`` x ``size``, ``channels`` channels, ``channels_first`` or last; uint8 0..255, or
    ``dtype="float32"`` in [0, 1]) is cut into ``arms`` vertical stripes; the paying arm's stripe is bright
    (200..255), the others dark (0..55), so a network must read where the brightness is, not how much of
    it there is. Discrete(arms) actions pay 1 for the arm, 0 otherwise (random: 1 / arms); with
    ``actions="box"`` (SAC) an action in [-1, 1] pays 1 - |action - the arm's place in [-1, 1]| / 2.
    """

    def __init__(self, size: int = 8, channels: int = 1, channels_first: bool = False, arms: int = 2,
                 actions: str = "discrete", dtype: str = "uint8"):
        if size < arms:
            raise ValueError(f"size {size} must be at least arms {arms} (one stripe per arm)")
        self.size, self.channels, self.channels_first, self.arms = size, channels, channels_first, arms
        self.dtype = np.dtype(dtype)
        shape = (channels, size, size) if channels_first else (size, size, channels)
        high = 255 if self.dtype == np.uint8 else 1.0
        self.observation_space = gym.spaces.Box(0, high, shape, self.dtype)
        if actions == "discrete":
            self.action_space: gym.Space = gym.spaces.Discrete(arms)
        elif actions == "box":
            self.action_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
        else:
            raise ValueError(f"actions must be 'discrete' or 'box', got {actions!r}")
        self.edges = np.linspace(0, size, arms + 1).round().astype(int)
        self.arm = 0

    def _obs(self) -> np.ndarray:
        rng = self.np_random
        image = rng.integers(0, 56, (self.size, self.size, self.channels))
        lo, hi = self.edges[self.arm], self.edges[self.arm + 1]
        image[:, lo:hi] = rng.integers(200, 256, (self.size, hi - lo, self.channels))
        if self.channels_first:
            image = image.transpose(2, 0, 1)
        return image.astype(np.uint8) if self.dtype == np.uint8 else (image / 255.0).astype(self.dtype)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.arm = int(self.np_random.integers(self.arms))
        return self._obs(), {"arm": self.arm}

    def step(self, action):
        if isinstance(self.action_space, gym.spaces.Discrete):
            reward = float(int(action) == self.arm)
        else:
            place = -1.0 + 2.0 * self.arm / max(self.arms - 1, 1)
            reward = 1.0 - abs(float(np.asarray(action).reshape(-1)[0]) - place) / 2.0
        return self._obs(), reward, True, False, {"arm": self.arm}


class DictBandit(ImageBandit):
    """ImageBandit seen through a Dict: {"image": the picture, "cue": [place, shown], "noise": Discrete(3)}.

    In half the episodes (``shown`` 1) the picture shows the paying arm as ImageBandit's does and ``place``
    is 0; in the other half (``shown`` -1) the picture is dark and ``place`` is the arm's place in [-1, 1].
    A policy reading only one key is right in about 1/2 + 1/(2 arms) of the episodes. ``grid`` adds a key
    "grid" of zeros, a rank-2 float Box that no built-in encoder takes."""

    def __init__(self, size: int = 6, arms: int = 2, actions: str = "discrete", grid: bool = False, **kwargs: Any):
        super().__init__(size=size, arms=arms, actions=actions, **kwargs)
        keys = {"image": self.observation_space, "cue": gym.spaces.Box(-1.0, 1.0, (2,), np.float32),
                "noise": gym.spaces.Discrete(3)}
        if grid:
            keys["grid"] = gym.spaces.Box(-1.0, 1.0, (3, 4), np.float32)
        self.observation_space = gym.spaces.Dict(keys)
        self.shown = True

    def _obs(self) -> dict[str, Any]:
        image = super()._obs()
        place = -1.0 + 2.0 * self.arm / max(self.arms - 1, 1)
        if not self.shown:
            image = image // 8 if image.dtype == np.uint8 else image / 8  # dark everywhere: no stripe to read
        cue = np.array([0.0 if self.shown else place, 1.0 if self.shown else -1.0], np.float32)
        obs = {"image": image, "cue": cue, "noise": int(self.np_random.integers(3))}
        if "grid" in self.observation_space.spaces:
            obs["grid"] = np.zeros((3, 4), np.float32)
        return obs

    def reset(self, *, seed=None, options=None):
        gym.Env.reset(self, seed=seed)
        self.arm = int(self.np_random.integers(self.arms))
        self.shown = bool(self.np_random.integers(2))
        return self._obs(), {"arm": self.arm}


class NanRewardEnv(gym.Env):
    """Returns a NaN reward after a few steps (``nan_at``, default 4): the env managers' reward check."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, nan_at: int = 4, reward: float = float("nan")):
        self.nan_at, self.reward = nan_at, reward

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(3, np.float32), {}

    def step(self, action):
        self.t += 1
        reward = self.reward if self.t >= self.nan_at else 1.0
        return np.full(3, 0.1 * self.t, np.float32), reward, False, self.t >= 20, {}


class HugeRewardEnv(NanRewardEnv):
    """Finite rewards of 1e30 after three steps: without reward normalisation the learner's squared errors
    overflow float32, so its loss turns non-finite (the non-finite loss guard)."""

    def __init__(self):
        super().__init__(nan_at=4, reward=1e30)


class MistakenEnv(gym.Env):
    """An env with one of the mistakes a user's env can make (``mistake``): "reset_shape" and "step_shape"
    (an observation of shape (5,) for a declared (3,)), "old_reset" (the observation alone), "old_step"
    (the old Gym API's four values), "nan_reward" (at step 3); anything else: a correct env."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, mistake: str = "none"):
        self.mistake = mistake

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        obs = np.zeros(5 if self.mistake == "reset_shape" else 3, np.float32)
        return obs if self.mistake == "old_reset" else (obs, {})

    def step(self, action):
        self.t += 1
        obs = np.zeros(5 if self.mistake == "step_shape" else 3, np.float32)
        if self.mistake == "old_step":
            return obs, 1.0, self.t >= 20, {}
        reward = float("nan") if self.mistake == "nan_reward" and self.t == 3 else 1.0
        return obs, reward, False, self.t >= 20, {}


class StartEnv(gym.Env):
    """Reset options reach the env: ``options["start"]`` is where the episode starts (module docstring)."""

    observation_space = gym.spaces.Box(-np.inf, np.inf, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, length: int = 3):
        self.length, self.start, self.t = length, 0.0, 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        options = dict(options or {})
        self.start = float(options.pop("start", 0.0))
        if options:
            raise TypeError(f"StartEnv.reset() got an unexpected option {sorted(options)[0]!r}")
        self.t = 0
        return np.array([self.start, self.start], np.float32), {}

    def step(self, action):
        self.t += 1
        return np.array([self.start + self.t, self.start], np.float32), 1.0, self.t >= self.length, False, {}


class MirrorCartPole(CartPoleEnv):
    """CartPole with roadrunner's mirror methods (module docstring); ``mistake`` breaks them for tests."""

    OBS = {"length": [-0.1, -1, -2], "range": [-0.1, -1, -2, -7], "not_reflection": [1, 2, 3, 0.1]}

    def __init__(self, mistake: str | None = None, **kwargs: Any):
        super().__init__(**kwargs)
        self.mistake = mistake
        if mistake == "no_action_method":
            self.get_action_mirror_indices = None  # (only the observation method is defined)

    def get_observation_mirror_indices(self) -> list[float]:
        if self.mistake == "raises":
            raise RuntimeError("no mirror yet")
        return self.OBS.get(self.mistake or "", [-0.1, -1, -2, -3])

    def get_action_mirror_indices(self) -> list[float]:
        return [1, 0.1]


for _id, _entry in (("relayrl-test/Faulty-v0", FaultyEnv), ("relayrl-test/NanReward-v0", NanRewardEnv),
                    ("relayrl-test/HugeReward-v0", HugeRewardEnv), ("relayrl-test/Mistaken-v0", MistakenEnv),
                    ("relayrl-test/DictObs-v0", DictObsEnv),
                    ("relayrl-test/SlowCartPole-v0", SlowCartPole), ("relayrl-test/SlowPendulum-v0", SlowPendulum),
                    ("relayrl-test/DtypeObs-v0", DtypeObsEnv),
                    ("relayrl-test/ImageBandit-v0", ImageBandit), ("relayrl-test/DictBandit-v0", DictBandit),
                    ("relayrl-test/NoisyPendulum-v0", NoisyPendulum), ("relayrl-test/Start-v0", StartEnv)):
    if _id not in gym.registry:
        gym.register(_id, entry_point=_entry, disable_env_checker=True)
if "relayrl-test/MirrorCartPole-v0" not in gym.registry:
    gym.register("relayrl-test/MirrorCartPole-v0", entry_point=MirrorCartPole, max_episode_steps=500)
