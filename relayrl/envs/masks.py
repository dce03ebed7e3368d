"""Action masks: which actions an env allows now, as one bool row per env (True = allowed).

The convention is Gymnasium's, PettingZoo's and SB3-contrib's ``action_mask`` (1 = legal): for a
``Discrete(n)`` action space a row has n entries; for a ``MultiDiscrete(nvec)`` one it has
``sum(nvec)``, one block per branch in branch order; for a hybrid action (relayrl/envs/hybrid.py: a
continuous part and discrete branches) the same blocks for its branches. An env gives its mask

- in ``info["action_mask"]`` of ``reset`` and of every ``step`` (the mask of the observation
  returned with it), or
- as the ``action_mask`` entry of a Dict observation (PettingZoo classic games): ``with_masks``
  moves it to the info, and the observation becomes the remaining entry (or the Dict of the
  remaining entries when there are several).

The simulator bridge's own block says the opposite (True = forbidden); ``bridge/agent_env.py``
converts it, so everything past an env sees one convention. A mask that allows no action of a
branch, or has the wrong width, is an ``ActionMaskError`` naming the space and the fix.
"""

from __future__ import annotations

from typing import Any, Callable

import gymnasium as gym
import numpy as np

from relayrl.envs.hybrid import hybrid_layout
from relayrl.errors import EnvError

MASK_KEY = "action_mask"


class ActionMaskError(EnvError):
    """An env's action mask does not fit its action space (wrong width, not booleans, no action allowed)."""


def branch_sizes(space: gym.Space) -> tuple[int, ...] | None:
    """Options per branch of a maskable action space: (n,) for Discrete(n), nvec for a 1-D MultiDiscrete, the
    discrete part's branches of a hybrid action; None for spaces that take no mask (Box, MultiBinary)."""
    hybrid = hybrid_layout(space)
    if hybrid is not None:
        return hybrid.branches
    if isinstance(space, gym.spaces.Discrete):
        return (int(space.n),)
    if isinstance(space, gym.spaces.MultiDiscrete) and len(space.nvec.shape) == 1:
        return tuple(int(n) for n in space.nvec)
    return None


def mask_width(space: gym.Space) -> int:
    """Entries of one env's mask (0: the space takes no mask)."""
    sizes = branch_sizes(space)
    return sum(sizes) if sizes else 0


def describe(space: gym.Space) -> str:
    """What a mask for ``space`` must look like, for error messages."""
    sizes = branch_sizes(space)
    if sizes is None:
        return (f"{space} takes no action mask (masks apply to Discrete and 1-D MultiDiscrete action spaces, and to "
                "the discrete part of a hybrid one)")
    if len(sizes) == 1 and isinstance(space, gym.spaces.Discrete):
        return f"{space} takes a mask of {sizes[0]} booleans, True = allowed"
    return (f"{space} takes a mask of {sum(sizes)} booleans (blocks of {', '.join(map(str, sizes))}, one per "
            "branch), True = allowed")


def check_mask(mask: Any, space: gym.Space, where: str, rows: int | None = None) -> np.ndarray:
    """``mask`` as a bool array ([width], or [rows, width] with ``rows``); ActionMaskError if it does not fit."""
    width = mask_width(space)
    array = np.asarray(mask)
    shape = (width,) if rows is None else (rows, width)
    if not width:
        raise ActionMaskError(f"{where}: {describe(space)}: remove the mask")
    if array.shape != shape:
        raise ActionMaskError(f"{where} has shape {array.shape}, but {describe(space)}: give "
                              f"{'one row of ' if rows is not None else ''}{width} entries"
                              f"{f' for each of the {rows} rows' if rows is not None else ''}")
    if array.dtype != bool:
        if array.dtype.kind not in "iu" or ((array != 0) & (array != 1)).any():
            raise ActionMaskError(f"{where} holds {array.dtype} values, but {describe(space)}: give booleans "
                                  "or 0/1 integers")
        array = array.astype(bool)
    start = 0
    for b, size in enumerate(branch_sizes(space)):
        empty = ~array[..., start:start + size].any(-1)
        if empty.any():
            branch = f"branch {b} (entries {start}..{start + size - 1})" if len(branch_sizes(space)) > 1 else "it"
            raise ActionMaskError(f"{where} allows no action of {branch} for {space}: an env must leave at least "
                                  "one action allowed (True = allowed; a mask of forbidden actions must be negated)")
        start += size
    return array


def allowed_all(space: gym.Space, n: int) -> np.ndarray:
    """[n, width] masks that allow everything (rows of envs that gave no mask)."""
    return np.ones((n, mask_width(space)), dtype=bool)


def info_mask(info: dict, space: gym.Space) -> np.ndarray | None:
    """One env's mask from its ``info`` as a batch of one ([1, width]), or None when it gives none: for
    the loops that step a single env (recorded episodes, a remote worker's test episodes)."""
    if MASK_KEY not in info:
        return None
    return check_mask(info[MASK_KEY], space, 'info["action_mask"]')[None]


def split_mask(obs: dict) -> tuple[Any, Any]:
    """A Dict observation with an ``action_mask`` entry as (the observation without it, the mask): the one
    entry left as it is, or the Dict of the entries left (``ActionMaskInfo``'s rule, for ``predict``)."""
    rest = {k: v for k, v in obs.items() if k != MASK_KEY}
    return (next(iter(rest.values())) if len(rest) == 1 else rest), obs[MASK_KEY]


class ActionMaskInfo(gym.Wrapper):
    """A Dict observation's ``action_mask`` entry moved to ``info["action_mask"]``.

    The observation space becomes the remaining entry (PettingZoo classic: ``{"observation",
    "action_mask"}`` gives the ``observation`` space), or the Dict of the remaining entries.
    """

    def __init__(self, env: gym.Env):
        super().__init__(env)
        rest = {k: v for k, v in env.observation_space.spaces.items() if k != MASK_KEY}
        if not rest:
            raise EnvError(f"the observation space {env.observation_space} holds only an action mask: give the "
                           "observation beside it")
        self.observation_space = next(iter(rest.values())) if len(rest) == 1 else gym.spaces.Dict(rest)

    def _split(self, obs: dict, info: dict) -> tuple[Any, dict]:
        rest, mask = split_mask(obs)
        return rest, {**info, MASK_KEY: mask}

    def reset(self, **kwargs: Any) -> tuple[Any, dict]:
        obs, info = self.env.reset(**kwargs)
        return self._split(obs, info)

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        obs, info = self._split(obs, info)
        return obs, reward, terminated, truncated, info


def with_masks(env: gym.Env) -> gym.Env:
    """``env``, with a Dict observation's ``action_mask`` entry moved to the info (``ActionMaskInfo``)."""
    space = env.observation_space
    if isinstance(space, gym.spaces.Dict) and MASK_KEY in space.spaces:
        return ActionMaskInfo(env)
    return env


class MaskedFactory:
    """A picklable env factory whose envs go through ``with_masks`` (every manager builds its envs with it)."""

    def __init__(self, factory: Callable[[], gym.Env]):
        self.factory = factory

    def __call__(self) -> gym.Env:
        return with_masks(self.factory())


def masked_factories(factories: list[Callable[[], gym.Env]]) -> list[Callable[[], gym.Env]]:
    return [f if isinstance(f, MaskedFactory) else MaskedFactory(f) for f in factories]


def sample_allowed(space: gym.Space, mask: Any = None) -> Any:
    """A random action of ``space`` among those ``mask`` allows (None: any), drawn with the space's own generator."""
    if mask is None or branch_sizes(space) is None:
        return space.sample()
    mask = check_mask(mask, space, "info['action_mask']")
    picks, start = [], 0
    for size in branch_sizes(space):
        picks.append(int(space.np_random.choice(np.flatnonzero(mask[start:start + size]))))
        start += size
    if isinstance(space, gym.spaces.Discrete):
        return np.int64(space.start + picks[0])
    if isinstance(space, gym.spaces.Tuple):  # hybrid: any continuous part, allowed branch options
        box, multi = space.spaces
        return box.sample(), (np.asarray(picks) + multi.start).astype(multi.dtype)
    return (np.asarray(picks) + space.start).astype(space.dtype)


BATCH_MASK_KEYS = (MASK_KEY, f"next_{MASK_KEY}")  # a rollout's masks acted under; transitions' masks of next_obs


def allow_all_where_unmasked(batches: list[dict[str, np.ndarray]], lead: int) -> list[dict[str, np.ndarray]]:
    """``batches`` about to be concatenated, where some carry a mask column and others do not (remote workers
    whose envs give no masks): the latter get all-True rows (every action allowed). ``lead``: the leading
    axes of a row (1 for transitions, 2 for [T, n] rollouts)."""
    for key in BATCH_MASK_KEYS:
        masked = [b for b in batches if key in b]
        if masked and len(masked) < len(batches):
            width = masked[0][key].shape[lead:]
            batches = [b if key in b else {**b, key: np.ones((*b["reward"].shape[:lead], *width), bool)}
                       for b in batches]
    return batches
