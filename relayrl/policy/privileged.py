"""Privileged critic inputs: an asymmetric actor-critic (``ppo.critic_only_keys``).

A Dict observation's named top-level keys are seen by the critic only (roadrunner's privileged critic:
simulator state a robot's policy never gets). Every store keeps the whole packed row (envs/packed.py), so
the learner's critic has the privileged keys for its value targets; the actor's encoder (``ActorKeys``)
reads the bytes of the other keys only, so its output cannot depend on the privileged ones. ``predict``
of a Dict that lacks them works (``fill_hidden`` packs zeros in their place, which the actor never reads).

``check_keys`` refuses what cannot work, naming the fix: a non-Dict observation, a key the observation does
not have, every key privileged (the actor would see nothing), and what would let the actor read the
privileged keys (one shared trunk, your own encoder of the whole Dict) or is not built for it (recurrent).
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from relayrl.envs import spaces as leaf_spaces
from relayrl.envs.packed import Field, PackedDict
from relayrl.errors import ConfigError, EnvError
from relayrl.policy.encoders import DictEncoder
from relayrl.policy.packed import Unpack

__all__ = ["ActorKeys", "check_keys", "actor_fields", "fill_hidden"]


def check_keys(keys: list[str], space: gym.Space, name: str, *, encoder: object, shared_trunk: bool | None,
               recurrent: object) -> None:
    """Refuse ``<name>.critic_only_keys`` that cannot give an actor without those keys (module docstring)."""
    option = f"{name}.critic_only_keys={list(keys)}"
    if not isinstance(space, PackedDict) or not isinstance(space.space, gym.spaces.Dict):
        raise EnvError(f"{option} names keys of a Dict observation, but the observations are {space}: set "
                       f"{name}.critic_only_keys=[] (or give the env a Dict observation with those keys)")
    have = list(space.space.spaces)
    missing = [key for key in keys if key not in have]
    if missing:
        raise EnvError(f"{option}: the observation has no key {', '.join(map(repr, missing))}; its keys are "
                       f"{', '.join(map(repr, have))}. Fix: name keys of the env's observation")
    if set(have) <= set(keys):
        raise ConfigError(f"{option} hides every key of the observation from the actor, which would then see "
                          f"nothing: leave at least one key out of {name}.critic_only_keys")
    if encoder is not None:
        raise ConfigError(f"{option} builds the actor's encoder on the other keys, but {name}.encoder={encoder!r} "
                          f"is one network of the whole Dict: set {name}.encoder=null, or {name}.critic_only_keys=[]")
    if shared_trunk:
        raise ConfigError(f"{option}: with {name}.shared_trunk=true the actor would read the critic's trunk, "
                          f"privileged keys included: set {name}.shared_trunk=false (or null)")
    if recurrent is not None:
        raise ConfigError(f"{option} is for feed-forward policies: set {name}.recurrent=null, or "
                          f"{name}.critic_only_keys=[]")


def actor_fields(space: PackedDict, keys: list[str]) -> list[Field]:
    """The packed fields the actor reads: those not under a privileged top-level key."""
    return [field for field in space.fields if field.path[0] not in keys]


class ActorKeys(nn.Module):
    """The actor's encoder: packed rows [n, nbytes] -> the features of the non-privileged keys only (their
    bytes are the only ones read), each key's encoder chosen as ``DictEncoder`` chooses it."""

    def __init__(self, space: PackedDict, keys: list[str], key: str = "encoder"):
        super().__init__()
        everything = DictEncoder(space.space, key)
        index = [i for i, field in enumerate(space.fields) if field.path[0] not in keys]
        self.fields = [space.fields[i] for i in index]
        self.parts = nn.ModuleList(everything.parts[i] for i in index)
        self.features = sum(part.features for part in self.parts)
        Unpack(space)  # (refuses a key dtype the networks cannot read)

    def forward(self, rows: torch.Tensor) -> torch.Tensor:
        data = rows if rows.dtype == torch.uint8 else rows.to(torch.uint8)
        n = data.shape[0]
        features = []
        for field, part in zip(self.fields, self.parts):
            value = Unpack._field(data[:, field.offset:field.offset + field.nbytes], field.dtype)
            features.append(part(value.reshape(n, *field.shape).to(torch.float32)))
        return torch.cat(features, dim=-1)


def fill_hidden(space: PackedDict, obs: dict[str, Any], keys: list[str]) -> dict[str, Any]:
    """``obs`` (one Dict observation, or a batch) with zeros for the privileged keys it lacks: the actor never
    reads them. Keys it has are kept (and ignored by the actor)."""
    absent = [key for key in keys if key not in obs]
    if not absent:
        return obs
    dict_space = space.space
    present = next((key for key in dict_space.spaces if key in obs), None)
    if present is None:
        raise EnvError(f"observation {sorted(obs)} has none of the keys {list(dict_space.spaces)} of {dict_space}")
    value = leaf_spaces.flatten(dict_space.spaces[present], obs[present])[0]
    leaf = next(f for f in space.fields if f.path[0] == present)
    array = np.asarray(value)
    batch = array.shape[:array.ndim - len(leaf.shape)]
    filled = dict(obs)
    for key in absent:
        sub = dict_space.spaces[key]
        arrays = [np.zeros((*batch, *f.shape), f.dtype) for f in space.fields if f.path[0] == key]
        filled[key] = leaf_spaces.build(sub, arrays)
    return filled
