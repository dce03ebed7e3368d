"""One PettingZoo agent's observation as a row and an action mask: the Dict handling of
``relayrl/envs/multiagent.py``, with the single-agent envs' conventions and parts.

- A Dict observation's ``action_mask`` entry (PettingZoo classic: ``{"observation", "action_mask"}``)
  is the agent's action mask (True = allowed, ``relayrl/envs/masks.py``), as ``with_masks`` does for a
  Gymnasium env; its shape must be the action space's mask width. ``info["action_mask"]`` of an agent
  is taken as well (the Dict entry wins when both are given).
- What is left becomes the row as ``with_masks`` then ``relayrl.envs.make`` would make it: one entry
  left is the observation itself (classic games: the board as a plain Box, so ``predict`` takes the
  board, ``ppo.obs_norm`` and export work as for any Box); several entries, or a Dict/Tuple without a
  mask, are packed into one uint8 row (``PackedDict``), which the policy's ``DictEncoder`` unpacks.

Every mask is checked where it enters (``check_mask``, its message naming the agent and env copy), so
the policies take them as they are.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from relayrl.envs import spaces
from relayrl.envs.masks import MASK_KEY, check_mask, describe, mask_width, split_mask
from relayrl.envs.packed import PackedDict, packable
from relayrl.errors import EnvError

__all__ = ["AgentObservations"]


class AgentObservations:
    """How one agent's raw observations (``raw_space``) become rows of ``space``, and masks.

    ``masked``: whether masks come with the rows: from the start when the observation has an
    ``action_mask`` entry, from the first ``info["action_mask"]`` on otherwise (``mask`` sets it).
    """

    def __init__(self, raw_space: gym.Space, action_space: gym.Space, agent: str):
        self.raw_space, self.action_space = raw_space, action_space
        self._in_obs = isinstance(raw_space, gym.spaces.Dict) and MASK_KEY in raw_space.spaces
        self.masked = self._in_obs
        space = raw_space
        if self._in_obs:
            self._check_mask_space(raw_space.spaces[MASK_KEY], agent)
            rest = {k: v for k, v in raw_space.spaces.items() if k != MASK_KEY}
            if not rest:
                raise EnvError(f"agent {agent!r}: the observation space {raw_space} holds only an action mask: give "
                               "the observation beside it")
            space = next(iter(rest.values())) if len(rest) == 1 else gym.spaces.Dict(rest)  # (split_mask's rule)
        self.space = PackedDict(space) if packable(space) else space  # (refuses keys it cannot store, by name)
        leaf = spaces.leaves(self.space)[0]  # (refuses spaces that are no array, clearly)
        self._shape, self._dtype = leaf.shape, leaf.dtype

    def _check_mask_space(self, mask_space: gym.Space, agent: str) -> None:
        width = mask_width(self.action_space)
        if not width:
            raise EnvError(f"agent {agent!r}: its observation has an {MASK_KEY!r} entry, but its action space "
                           f"{describe(self.action_space)}: drop the entry, or give a Discrete action space")
        shape = tuple(getattr(mask_space, "shape", None) or ())
        if not isinstance(mask_space, (gym.spaces.Box, gym.spaces.MultiBinary)) or shape != (width,):
            raise EnvError(f"agent {agent!r}: the {MASK_KEY!r} entry of its observation space is {mask_space}, but "
                           f"{describe(self.action_space)}: declare it as Box(0, 1, ({width},), int8) and give one "
                           "entry per action")

    def row(self, obs: Any) -> Any:
        """What stands for ``obs`` in a row (the mask entry dropped); ``rows`` stacks them."""
        return split_mask(obs)[0] if self._in_obs else obs

    def rows(self, values: list[Any]) -> np.ndarray:
        """[n, *space.shape] rows of ``values`` (``row`` outputs), packed when the space is a ``PackedDict``."""
        out = np.zeros((len(values), *self._shape), self._dtype)
        pack = self.space.pack if isinstance(self.space, PackedDict) else None
        for k, value in enumerate(values):
            out[k] = pack(value) if pack else value
        return out

    def mask(self, obs: Any, info: Any, where: str) -> np.ndarray | None:
        """The agent's mask ([width] bool) from its observation's entry or its ``info``; None when neither
        has one. ``where`` (the agent and copy) heads the refusal of a mask that does not fit."""
        if self._in_obs:
            return check_mask(obs[MASK_KEY], self.action_space, f"{where}: observation[{MASK_KEY!r}]")
        if isinstance(info, dict) and MASK_KEY in info:
            self.masked = True
            return check_mask(info[MASK_KEY], self.action_space, f"{where}: info[{MASK_KEY!r}]")
        return None
