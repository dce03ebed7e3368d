"""NativeVectorEnv: envs that ship their own vectorised implementation, under relayrl's same-step contract.

Three sources of native implementations:

- Gymnasium's ``vector_entry_point`` (``CartPole-v0``/``-v1``: ``CartPoleVectorEnv``, one numpy array op
  per step for all envs);
- EnvPool (the ``envpool`` extra): its C++ envs, for the ids it lists (``Pong-v5``, ``Acrobot-v1``, ...);
- ale-py's own C++ vector env (``AtariVectorEnv``, ale-py >= 0.11, the ``atari`` extra) for ``ALE/`` ids, with
  relayrl's Atari preprocessing and frame stack (envs/ale_vector.py). It autoresets on the same step itself.

Gymnasium's and EnvPool's autoreset NEXT_STEP: the step after an episode ends ignores that env's action and
returns the reset observation with reward 0. relayrl's managers autoreset on the SAME step
(``StepResult.final_obs``), so this manager resets the finished envs itself, right after the step that ended
them, and no collector ever sees a dummy step:

- CartPoleVectorEnv has no partial reset (its ``reset`` resets every env, and it ignores
  ``options["reset_mask"]``), so its adapter writes the new episode's state into the env's arrays
  (``state``, ``steps``, ``prev_done``: what its own next step would do) and draws that state from one
  generator per env, seeded ``seed + k`` and drawn exactly as ``CartPoleEnv.reset`` draws it. The
  vector env seeded alike would not match the single envs (it draws every env's state from one
  generator); with per-env generators the trajectories equal the ``sync`` manager's bit for bit, for
  the same seeds and actions (tests/unit/envs/test_native.py).
- EnvPool resets a subset of envs with ``reset(env_ids)``; its next step is then a real one. Its envs
  are its own C++ ports with their own random streams: same seeds give EnvPool's trajectories, not
  Gymnasium's.

What it cannot do, refused with an EnvError (and ``env.manager: auto`` does not pick it then):
per-env kwargs, wrappers (``frame_stack``, except ALE's own stack), render modes, env factories, ids with no
adapter, and the ALE options of envs/ale_vector.py's docstring.

``env.manager: auto`` picks it for CartPole, EnvPool-only ids, and ``ALE/`` ids at any number of envs: on the
project's 2-core machine (ALE/Pong-v5 with relayrl's preprocessing, random actions, env steps/s, the best of 3
runs of 2.5 s each, load average about 2 from other jobs; docs/benchmarks.md) ALE's vector env stepped faster
than sync and subproc at every count:

    envs         1      2      4      8     16
    native   3,284  5,954  6,784  7,161  7,790
    sync     2,904  2,843  2,822  2,935  3,006
    subproc  2,760  4,299  4,951  5,294  5,481

(under a load average of 4 to 6 the order held from 2 envs up and native tied with sync at 1: 2,431 to 2,552).
"""

from __future__ import annotations

import importlib.util
import warnings
from types import MappingProxyType
from typing import Any, Mapping

import gymnasium as gym
import numpy as np
from gymnasium.utils import seeding

from relayrl.envs.ale_vector import AleVectorAdapter, ale_refusal, ale_vector_available, is_ale_id
from relayrl.envs.imageobs import wrappers_in_use
from relayrl.envs.native_backend import NativeBackend, in_env_order
from relayrl.envs.registry import spec_stop_value
from relayrl.envs.vector import VectorEnv
from relayrl.errors import EnvError
from relayrl.types import StepResult

__all__ = ["NativeVectorEnv", "native_source", "native_refusal", "picks_native", "in_process_manager",
           "native_stop_value", "envpool_ids"]


# ---------------------------------------------------------------- which ids have a native implementation


def envpool_ids() -> frozenset[str]:
    """The ids EnvPool provides, or none when the ``envpool`` extra is not installed."""
    global _ENVPOOL_IDS
    if _ENVPOOL_IDS is None:
        if importlib.util.find_spec("envpool") is None:
            _ENVPOOL_IDS = frozenset()
        else:
            import envpool

            _ENVPOOL_IDS = frozenset(envpool.list_all_envs())
    return _ENVPOOL_IDS


_ENVPOOL_IDS: frozenset[str] | None = None


def _gym_vector_class(env_id: str) -> type | None:
    spec = gym.registry.get(env_id)
    if spec is None or spec.vector_entry_point is None or not isinstance(spec.vector_entry_point, str):
        return None
    module, _, name = spec.vector_entry_point.partition(":")
    if importlib.util.find_spec(module.split(".")[0]) is None:
        return None
    try:
        return getattr(importlib.import_module(module), name, None)
    except ImportError:  # e.g. the phys2d envs without jax
        return None


def native_source(env_id: str, prefer_gymnasium_single: bool = False) -> str | None:
    """"gymnasium" (an adapted ``vector_entry_point``), "ale" (ALE's vector env, for ``ALE/`` ids), "envpool",
    or None: where ``env_id``'s native implementation comes from. With ``prefer_gymnasium_single`` (what
    ``auto`` asks), EnvPool counts only for ids Gymnasium does not register, so ``auto`` never swaps
    Gymnasium's env for EnvPool's port."""
    if not isinstance(env_id, str):
        return None
    if is_ale_id(env_id) and ale_vector_available():  # (ALE registers AtariVectorEnv as their vector entry point)
        return "ale"
    cls = _gym_vector_class(env_id)
    if cls is not None and cls in _GYM_ADAPTERS:
        return "gymnasium"
    if prefer_gymnasium_single and env_id in gym.registry:  # (decided without importing envpool: ~2 s)
        return None
    return "envpool" if env_id in envpool_ids() else None


def native_refusal(env_id: Any, *, env_kwargs: Any = None, wrapping: dict[str, Any] | None = None,
                   render_mode: str | None = None, auto: bool = False) -> str | None:
    """Why the native manager cannot build ``env_id`` with these options, or None when it can."""
    if not isinstance(env_id, str):
        return "an env factory has no native vector implementation: use manager sync or subproc"
    source = native_source(env_id, prefer_gymnasium_single=auto)
    if source is None:
        extra = "" if importlib.util.find_spec("envpool") else " (EnvPool ids need relayrl's envpool extra)"
        if is_ale_id(env_id):
            extra = " (ALE/ ids need ale-py 0.11 or newer, relayrl's atari extra)"
        return (f"{env_id!r} has no native vector implementation relayrl can use{extra}: use manager sync, "
                "subproc or auto")
    if isinstance(env_kwargs, list):
        return "the native manager builds every env alike: per-env env_kwargs need manager sync or subproc"
    if source == "ale":
        why = ale_refusal(env_kwargs, wrapping)
        if why is not None:
            return why
    wrappers = wrappers_in_use(wrapping, ("resize", "grayscale") if source == "ale" else
                               ("frame_stack", "resize", "grayscale"))
    if wrappers:
        return (f"the native manager takes no wrappers ({', '.join(wrappers)}): use manager sync or subproc, "
                "or the env's own option")
    if render_mode is not None:
        return f"the native manager does not render (render_mode={render_mode!r}): use manager sync"
    return None


def picks_native(env_id: Any, env_kwargs: Any = None, wrapping: dict[str, Any] | None = None) -> bool:
    """Whether ``env.manager: auto`` uses the native manager for this env: it has a native implementation
    (Gymnasium's own, or EnvPool's for an id Gymnasium does not register) and no option it cannot honour."""
    return native_refusal(env_id, env_kwargs=env_kwargs, wrapping=wrapping, auto=True) is None


def in_process_manager(manager: str, env_id: Any, env_kwargs: Any = None,
                       wrapping: dict[str, Any] | None = None) -> str:
    """The manager for envs stepped in this process (rollout workers, ``relayrl eval``): "native" when the
    config asks for it or ``auto`` picks it, else "sync" (the processes around them are the parallelism)."""
    if manager == "native" or (manager == "auto" and picks_native(env_id, env_kwargs, wrapping)):
        return "native"
    return "sync"


def native_stop_value(env_id: str) -> float | None:
    """The registered reward threshold: Gymnasium's, or for an EnvPool-only id EnvPool's."""
    if env_id in gym.registry or native_source(env_id) != "envpool":
        return spec_stop_value(env_id)
    import envpool

    threshold = envpool.make_spec(env_id).reward_threshold
    return None if threshold is None else float(threshold)


# ---------------------------------------------------------------- adapters


class CartPoleAdapter(NativeBackend):
    """Gymnasium's CartPoleVectorEnv, reset on the same step from per-env generators (module docstring).

    A start state is ``low + (high - low) * u`` with ``u`` the generator's next 4 doubles: that is how numpy
    computes ``CartPoleEnv.reset``'s ``np_random.uniform(low, high, size=(4,))``, bit for bit (the sync parity
    test checks it). The generators serve nothing but these draws, so each env's next ``PREDRAWN`` start
    draws are taken ahead in one call (``random((PREDRAWN, 4))`` yields the same doubles as that many
    ``random(4)`` calls) and a step's resets gather theirs with one indexing, not a Python call per env.
    """

    PREDRAWN = 32

    def __init__(self, env_id: str, num_envs: int, max_episode_steps: int | None, kwargs: dict[str, Any]):
        extra = {} if max_episode_steps is None else {"max_episode_steps": max_episode_steps}
        try:
            self.env = gym.make_vec(env_id, num_envs, vectorization_mode="vector_entry_point", **extra, **kwargs)
        except TypeError as exc:
            raise EnvError(f"environment {env_id!r} rejected its kwargs {kwargs}: {exc}; fix env.kwargs in the "
                           "config") from None
        self.inner = self.env.unwrapped
        self.num_envs = num_envs
        self.single_observation_space = self.inner.single_observation_space
        self.single_action_space = self.inner.single_action_space
        # its step asserts action_space.contains(actions) on the batch, which costs as much as the physics
        # (~18 µs of ~40 at 32 envs); NativeVectorEnv has checked shape, dtype and range already
        self.inner.action_space = _Prechecked(self.inner.action_space.nvec)
        self.rngs: list[np.random.Generator] = []
        self.ahead = np.empty((num_envs, self.PREDRAWN, 4))  # each env's next start draws
        self.used = np.zeros(num_envs, np.intp)  # how many of them were taken

    def _draw(self, rows: np.ndarray) -> np.ndarray:
        """New start states [4, len(rows)] of envs ``rows`` (class docstring)."""
        for k in rows[self.used[rows] == self.PREDRAWN]:
            self.ahead[k] = self.rngs[k].random((self.PREDRAWN, 4))
            self.used[k] = 0
        u = self.ahead[rows, self.used[rows]]
        self.used[rows] += 1
        low, high = self.inner.low, self.inner.high
        return low + (high - low) * u.T

    def reset(self, seed: int | None) -> np.ndarray:
        self.env.reset(seed=seed)  # bounds, step counters, the done flags
        if seed is not None or not self.rngs:  # (without a seed the streams go on, as the single envs' do)
            self.rngs = [seeding.np_random(None if seed is None else seed + k)[0] for k in range(self.num_envs)]
            self.used[:] = self.PREDRAWN  # nothing drawn ahead yet
        inner = self.inner
        inner.state = self._draw(np.arange(self.num_envs))
        return inner.state.T.astype(np.float32)

    def step(self, actions):
        obs, reward, terminated, truncated, _ = self.env.step(actions)
        done = terminated | truncated
        if not np.count_nonzero(done):  # (ndarray.any goes through a Python wrapper: ~1 µs more per call)
            return obs, reward, terminated, truncated, obs
        inner = self.inner
        rows = np.flatnonzero(done)
        inner.state[:, rows] = state = self._draw(rows)
        inner.steps[rows] = 0
        inner.prev_done[:] = False  # so its next step does not reset them again
        final_obs, obs = obs, obs.copy()
        obs[rows] = state.T
        return obs, reward, terminated, truncated, final_obs

    def close(self) -> None:
        self.env.close()


class _Prechecked(gym.spaces.MultiDiscrete):
    """A batch action space whose ``contains`` trusts its caller (NativeVectorEnv checked the actions)."""

    def contains(self, x: Any) -> bool:
        return True


_GYM_ADAPTERS: dict[type, type[NativeBackend]] = {}
try:
    from gymnasium.envs.classic_control.cartpole import CartPoleVectorEnv

    _GYM_ADAPTERS[CartPoleVectorEnv] = CartPoleAdapter
except ImportError:  # pragma: no cover - a Gymnasium without it
    pass


class EnvPoolAdapter(NativeBackend):
    """An EnvPool pool in synchronous mode; finished envs reset with ``reset(env_ids)`` (module docstring).

    EnvPool seeds when the pool is built, so ``reset(seed)`` with another seed than the pool's rebuilds it.
    """

    def __init__(self, env_id: str, num_envs: int, max_episode_steps: int | None, kwargs: dict[str, Any]):
        self.env_id, self.num_envs = env_id, num_envs
        self.kwargs = dict(kwargs)
        if max_episode_steps is not None:
            self.kwargs["max_episode_steps"] = max_episode_steps
        self.seed: int | None = None
        self.env = self._build(0)
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*precision lowered", category=UserWarning)
            self.single_observation_space = self.env.observation_space
            self.single_action_space = self.env.action_space

    def _build(self, seed: int) -> Any:
        import envpool

        try:
            with warnings.catch_warnings():  # its float64 Box bounds, cast to float32 by Gymnasium
                warnings.filterwarnings("ignore", message=".*precision lowered", category=UserWarning)
                env = envpool.make_gymnasium(self.env_id, num_envs=self.num_envs, seed=seed, **self.kwargs)
        except (TypeError, KeyError, ValueError, AssertionError) as exc:
            raise EnvError(f"EnvPool rejected {self.env_id!r} with kwargs {self.kwargs}: {exc}; fix env.kwargs in "
                           "the config") from None
        self.seed = seed
        return env

    def reset(self, seed: int | None) -> np.ndarray:
        if seed is not None and seed != self.seed:
            self.env.close()
            self.env = self._build(seed)
        obs, info = self.env.reset()
        return in_env_order(info["env_id"], obs)[0]

    def step(self, actions):
        obs, reward, terminated, truncated, info = self.env.step(actions)
        obs, reward, terminated, truncated = in_env_order(info["env_id"], obs, reward, terminated, truncated)
        terminated, truncated = terminated.astype(bool), truncated.astype(bool)
        done = terminated | truncated
        if not np.count_nonzero(done):
            return obs, reward.astype(np.float32), terminated, truncated, obs
        rows = np.flatnonzero(done).astype(np.int32)
        new, new_info = self.env.reset(rows)
        final_obs, obs = obs, obs.copy()
        obs[new_info["env_id"]] = new
        return obs, reward.astype(np.float32), terminated, truncated, final_obs

    def close(self) -> None:
        self.env.close()


# ---------------------------------------------------------------- the manager

NO_INFO: Mapping[str, Any] = MappingProxyType({})  # every row's info: empty, read-only, so one object serves all


class NativeVectorEnv(VectorEnv):
    """``num_envs`` copies of ``env_id`` in its native vector implementation (module docstring).

    Args:
        max_restarts: accepted for symmetry with the other managers; unused: the envs share one object,
            so an error in it ends the run.
        source: "gymnasium", "ale" or "envpool" (default: ``native_source(env_id)``).
        wrapping: ``make``'s preprocessing options; only ALE's ``frame_stack`` applies (``native_refusal``
            refuses the others).
        threads: the threads of a source that steps in its own (ALE's; default: one per core, at most
            ``num_envs``); the other sources step in this thread and ignore it.

    ``send`` starts a step and ``recv`` collects it; with ALE the step runs in ALE's threads in between.
    """

    def __init__(self, env_id: str, num_envs: int, *, env_kwargs: dict[str, Any] | None = None,
                 max_episode_steps: int | None = None, max_restarts: int = 3, source: str | None = None,
                 wrapping: dict[str, Any] | None = None, threads: int | None = None):
        if num_envs < 1:
            raise EnvError(f"num_envs must be at least 1, got {num_envs}")
        source = source or native_source(env_id)
        if source == "envpool" and env_id not in envpool_ids():
            raise EnvError(f"EnvPool does not provide {env_id!r}" if envpool_ids() else
                           "EnvPool is not installed: python -m pip install -c constraints.txt -e '.[envpool]'")
        kwargs = dict(env_kwargs or {})
        if source == "ale":
            self.backend: NativeBackend = AleVectorAdapter(env_id, num_envs, max_episode_steps, kwargs,
                                                           (wrapping or {}).get("frame_stack"), threads)
        elif source == "gymnasium":
            self.backend = _GYM_ADAPTERS[_gym_vector_class(env_id)](env_id, num_envs, max_episode_steps, kwargs)
        else:
            self.backend = EnvPoolAdapter(env_id, num_envs, max_episode_steps, kwargs)
        self.source = source
        self.num_envs = num_envs
        self._setup_spaces(self.backend.single_observation_space, self.backend.single_action_space)
        self._env_ids = np.arange(num_envs)
        self._pending = False  # a send that recv has not collected

    def reset(self, seed: int | None = None) -> np.ndarray:
        self._pending = False
        return np.ascontiguousarray(self.backend.reset(seed))

    def send(self, actions: np.ndarray) -> None:
        self.backend.send(self._check_actions(actions, self.num_envs))
        self._pending = True

    def recv(self) -> StepResult:
        if not self._pending:
            raise EnvError("recv() called without a pending send(actions)")
        self._pending = False
        obs, reward, terminated, truncated, final_obs = self.backend.recv()
        # row-major, as every other manager returns them: CartPoleVectorEnv's observations are a transposed
        # (column-major) view, and a matrix product reads those through another kernel, whose float32 sums
        # may differ in the last bit, so a run on native would not be a run on sync
        same = final_obs is obs
        obs = np.ascontiguousarray(obs)
        final_obs = obs if same else np.ascontiguousarray(final_obs)
        return StepResult(obs=obs, reward=reward, terminated=terminated, truncated=truncated, final_obs=final_obs,
                          env_ids=self._env_ids, info=[NO_INFO] * self.num_envs)

    def close(self) -> None:
        self.backend.close()
