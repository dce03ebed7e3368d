"""AleVectorAdapter: ale-py's own C++ vector env (``ale_py.vector_env.AtariVectorEnv``, ale-py >= 0.11) for
``ALE/`` ids under the native manager (envs/native.py).

It applies relayrl's Atari preprocessing (envs/registry.py) in its C++ threads: frame skip 4 with max-pooling,
84x84 grayscale, up to 30 no-op starts, no fire on reset, no reward clipping, no life-loss terminal, and a stack
of ``env.frame_stack`` frames (None: 4; 1: no stack, [84, 84] as the sync manager gives). Game, sticky actions
(0.25), action set (minimal) and the 108,000-frame limit come from the id's registration (ALE's v5 defaults);
``env.kwargs`` may set ``repeat_action_probability``, ``full_action_space`` and ``max_num_frames_per_episode``.
Every other option relayrl's own Atari path honours (``mode``, ``difficulty``, ``obs_type``, ``frameskip``,
``continuous``, raw frames with ``atari_preprocessing: false``, ``resize``, ``grayscale``, render modes) is
refused with an EnvError naming it: use manager sync or subproc for those.

Autoreset: the env is built with ``autoreset_mode="SameStep"``: its C++ resets a finished env inside the step
that ended it and returns the episode's last observation in ``info["final_obs"]`` (the Python class asserts
NEXT_STEP only in its XLA path). So a step is one ``send``/``recv`` round, with no dummy step and no reset call
after it; tests/unit/envs/test_ale_native.py checks that episodes under a frame limit last exactly as long as
the limit says, and that the observation after an episode ends is the new episode's first.

``send`` starts the step in ALE's threads and returns; ``recv`` waits for it, so a caller can work in between.

Where it differs from the sync/subproc managers' Gymnasium envs (spaces, dtypes and shapes are the same):

- seeds: env k is seeded ``seed + k``, but ALE's C++ envs draw their no-op starts and sticky actions from their
  own streams: the same seed gives the same trajectories run after run, not those of Gymnasium's single envs;
- a new episode's stack holds its first frame after zero frames (the sync manager's repeats the first frame);
- ``max_episode_steps`` becomes ALE's frame limit (``max_num_frames_per_episode``, the smaller of the two when
  both are set): relayrl's own path counts frames too (its time limit wraps the frame-skip-1 env), but ALE
  counts only the frames of the agent's steps, not the no-op start's, so an episode is truncated after
  exactly ``max_episode_steps / 4`` steps where the sync manager's ends up to 30 frames (7 steps) sooner.

Threads: ``threads`` (default ``min(num_envs, cores)``); rollout workers, one process per core, step with 1
(runtime/rollout_worker.py).
"""

from __future__ import annotations

import importlib.util
import os
from typing import Any

import gymnasium as gym
import numpy as np

from relayrl.envs.native_backend import NativeBackend, StepArrays, in_env_order
from relayrl.envs.registry import registered_spec
from relayrl.errors import EnvError

__all__ = ["AleVectorAdapter", "ale_vector_available", "is_ale_id", "ale_refusal", "TAKEN_KWARGS"]

ALE_PREFIX = "ALE/"
TAKEN_KWARGS = ("repeat_action_probability", "full_action_space", "max_num_frames_per_episode")
_REGISTERED = {"game", "frameskip", *TAKEN_KWARGS}  # registration kwargs it reads (v5's frameskip 4 is ours too)
_PREPROCESSING = dict(frameskip=4, maxpool=True, img_height=84, img_width=84, grayscale=True, noop_max=30,
                      use_fire_reset=False, reward_clipping=False, episodic_life=False)
DEFAULT_STACK = 4  # registry.ATARI_STACK
NO_FRAME_LIMIT = 2**31 - 1
_USE_SYNC = "use manager sync or subproc"


def ale_vector_available() -> bool:
    """Whether ale-py with its vector env (>= 0.11) is installed."""
    try:
        return importlib.util.find_spec("ale_py.vector_env") is not None
    except ModuleNotFoundError:
        return False


def is_ale_id(env_id: Any) -> bool:
    return isinstance(env_id, str) and env_id.startswith(ALE_PREFIX)


def ale_refusal(env_kwargs: Any, wrapping: dict[str, Any] | None) -> str | None:
    """Why ALE's vector env cannot honour these options (module docstring), or None."""
    if (wrapping or {}).get("atari_preprocessing", True) is not True:
        return f"ALE's vector env always applies the Atari preprocessing: for raw frames {_USE_SYNC}"
    other = sorted(set(env_kwargs or {}) - set(TAKEN_KWARGS))
    if other:
        return (f"ALE's vector env does not take env.kwargs {', '.join(other)} (only {', '.join(TAKEN_KWARGS)}): "
                f"{_USE_SYNC}")
    return None


class AleVectorAdapter(NativeBackend):
    """``num_envs`` copies of an ``ALE/`` game in one AtariVectorEnv (module docstring)."""

    def __init__(self, env_id: str, num_envs: int, max_episode_steps: int | None, kwargs: dict[str, Any],
                 frame_stack: int | None = None, threads: int | None = None):
        from ale_py.vector_env import AtariVectorEnv

        why = ale_refusal(kwargs, None)
        if why is not None:
            raise EnvError(why)
        registered = dict(registered_spec(env_id).kwargs)
        unknown = sorted(set(registered) - _REGISTERED)
        if unknown:
            raise EnvError(f"{env_id!r} is registered with {', '.join(unknown)}, which ALE's vector env does not "
                           f"take: {_USE_SYNC}")
        options = {k: registered[k] for k in TAKEN_KWARGS if k in registered}
        options.update(kwargs)
        if max_episode_steps is not None:
            frames = options.get("max_num_frames_per_episode")
            options["max_num_frames_per_episode"] = (max_episode_steps if frames is None
                                                     else min(frames, max_episode_steps))
        if options.get("max_num_frames_per_episode") is None:  # no limit (ALE's vector env truncates at once on 0)
            options["max_num_frames_per_episode"] = NO_FRAME_LIMIT
        self.stack = DEFAULT_STACK if frame_stack is None else max(1, frame_stack)  # (0 and 1: no stack, as make)
        self.num_envs = num_envs
        self.threads = threads or min(num_envs, os.cpu_count() or 1)
        try:
            self.env = AtariVectorEnv(registered["game"], num_envs, num_threads=self.threads,
                                      autoreset_mode="SameStep", stack_num=self.stack, **_PREPROCESSING, **options)
        except (TypeError, ValueError, RuntimeError, gym.error.Error) as exc:
            raise EnvError(f"ALE's vector env rejected {env_id!r} with {options}: {exc}; fix env.kwargs in the "
                           "config") from None
        frame = self.env.single_observation_space.shape[1:]
        self._shape = (num_envs, *frame) if self.stack == 1 else (num_envs, self.stack, *frame)
        self.single_observation_space = gym.spaces.Box(0, 255, self._shape[1:], np.uint8)
        self.single_action_space = self.env.single_action_space
        self._busy = False  # a step sent, not received yet

    def reset(self, seed: int | None) -> np.ndarray:
        if self._busy:  # (a step nobody collected: take it, so the reset is the only call in flight)
            self.recv()
        obs, info = self.env.reset(seed=None if seed is None else int(seed))
        return in_env_order(info["env_id"], obs.reshape(self._shape))[0]

    def send(self, actions: np.ndarray) -> None:
        if self._busy:
            raise EnvError("send() called again before recv() collected the step it started")
        self.env.send(actions.astype(np.int64, copy=False))
        self._busy = True

    def recv(self) -> StepArrays:
        if not self._busy:
            raise EnvError("recv() called without a pending send(actions)")
        self._busy = False
        obs, reward, terminated, truncated, info = self.env.recv()
        obs = obs.reshape(self._shape)
        final = info.get("final_obs")  # (present when an env finished on this step)
        final_obs = obs if final is None else final.reshape(self._shape)
        obs, reward, terminated, truncated, final_obs = in_env_order(
            info["env_id"], obs, reward, terminated, truncated, final_obs)
        return obs, reward.astype(np.float32), terminated, truncated, final_obs

    def step(self, actions: np.ndarray) -> StepArrays:
        self.send(actions)
        return self.recv()

    def close(self) -> None:
        if self._busy:
            self.recv()
        self.env.close()
