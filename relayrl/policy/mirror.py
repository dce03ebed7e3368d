"""Mirror symmetry for legged robots: a left/right reflection of observations and actions.

A mirror spec is a list of signed indices in roadrunner's convention: entry i says where element i
of the mirrored vector comes from and whether it is negated, ``mirrored[i] = sign(spec[i]) *
x[abs(spec[i])]``. Index 0 cannot carry a sign, so it is written 0.1 (or -0.1 to negate); a bare
0 is refused rather than read as "keep", because YAML and Python read ``-0`` as 0 and the sign would
be lost without a word. A reflection applied twice is the identity; ``MirrorSpec`` refuses a spec
that is not.

    spec = MirrorSpec.from_config(obs=[0.1, 1, 5, 6, 7, 2, 3, 4], act=[3, 4, 5, 0.1, 1, 2])
    loss = mirror_loss(actor_mean, obs, spec)   # 0 for an exactly symmetric policy

Where a spec comes from (``MirrorSpec.load``, PPO's ``mirror_spec``): a YAML file, or ``auto``: the
built-in spec of a Gymnasium walker, else the env's own ``get_observation_mirror_indices()`` and
``get_action_mirror_indices()`` (roadrunner's names, the same signed-index convention), read once from
the unwrapped env by relayrl/envs/mirror_source.py and handed over as ``EnvMirrorIndices``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import torch
import yaml

from relayrl.errors import ConfigError, EnvError

OBS_METHOD, ACT_METHOD = "get_observation_mirror_indices", "get_action_mirror_indices"

# Gymnasium MuJoCo walkers whose left and right legs mirror each other (planar: swap, no negation).
BUILT_IN: dict[str, dict[str, list[float]]] = {
    # obs: rootz, rooty, (thigh, leg, foot) right, (thigh, leg, foot) left, then the same 9 velocities
    # with the root's x, z and angular velocity first; act: right (thigh, leg, foot), left (...)
    "Walker2d": {"obs": [0.1, 1, 5, 6, 7, 2, 3, 4, 8, 9, 10, 14, 15, 16, 11, 12, 13],
                 "act": [3, 4, 5, 0.1, 1, 2]},
}


def _parse(spec: Sequence[float], size: int | None, what: str) -> tuple[np.ndarray, np.ndarray]:
    if not isinstance(spec, (list, tuple, np.ndarray)) or not len(spec):
        raise ConfigError(f"mirror {what} spec must be a non-empty list of signed indices, got {spec!r}")
    for k, entry in enumerate(spec):
        if isinstance(entry, bool) or not isinstance(entry, (int, float, np.integer, np.floating)):
            raise ConfigError(f"mirror {what} spec entry {k} is {entry!r}: expected a signed index (a number)")
        if entry == 0:  # 0, 0.0 and -0.0; -0 in YAML or Python is already 0 here, so its sign is gone
            raise ConfigError(f"mirror {what} spec entry {k} is {entry!r}: a zero cannot carry a sign, so index 0 "
                              "is written 0.1 to keep it or -0.1 to negate it (roadrunner's convention)")
        if not math.isclose(abs(entry), 0.1, rel_tol=1e-6) and abs(entry) != int(abs(entry)):  # (a float32 0.1 too)
            raise ConfigError(f"mirror {what} spec entry {k} is {entry!r}: entries are whole indices with a sign, "
                              "and index 0 is written 0.1 (or -0.1 to negate it)")
    values = np.asarray(spec, dtype=np.float64)
    index = np.abs(values).astype(np.int64)  # 0.1 -> 0
    sign = np.where(values < 0, -1.0, 1.0)
    n = len(values)
    if size is not None and n != size:
        raise ConfigError(f"mirror {what} spec has {n} entries but the {what} has {size} elements")
    if (index >= n).any():
        raise ConfigError(f"mirror {what} spec points past its end: {values[index >= n].tolist()} (size {n})")
    broken = [i for i in range(n) if index[index[i]] != i or sign[i] * sign[index[i]] < 0]
    if broken:
        raise ConfigError(f"mirror {what} spec is not a reflection (applying it twice must give back the "
                          f"original): entries {broken} do not map back, e.g. {broken[0]} -> "
                          f"{values[broken[0]]:g} -> {values[index[broken[0]]]:g}")
    return index, sign


@dataclass(frozen=True)
class EnvMirrorIndices:
    """The lists an env's ``get_observation_mirror_indices()`` and ``get_action_mirror_indices()`` returned."""

    env_id: str
    obs: Sequence[float]
    act: Sequence[float]

    def spec(self, obs_size: int, act_size: int) -> "MirrorSpec":
        """The MirrorSpec, checked against the spaces; a bad list is an EnvError naming the env's method."""
        parsed = []
        for method, spec, size, what in ((OBS_METHOD, self.obs, obs_size, "observation"),
                                         (ACT_METHOD, self.act, act_size, "action")):
            try:
                parsed.append(_parse(spec, size, what))
            except ConfigError as exc:
                raise EnvError(f"{self.env_id}'s {method}() does not give a mirror of its {what}s: {exc}. It must "
                               f"return {size} signed indices, a reflection of the {size} {what} elements (index "
                               "0 written 0.1, or -0.1 to negate it; relayrl/policy/mirror.py), or give "
                               "ppo.mirror_spec=FILE.yaml") from None
        (oi, os_), (ai, as_) = parsed
        return MirrorSpec(oi, os_, ai, as_)


def no_env_mirror() -> EnvMirrorIndices | None:
    """An env that gives no mirror indices (what ``bind_env`` assumes when told nothing)."""
    return None


@dataclass
class MirrorSpec:
    obs_index: np.ndarray
    obs_sign: np.ndarray
    act_index: np.ndarray
    act_sign: np.ndarray

    @classmethod
    def from_config(cls, obs: Sequence[float], act: Sequence[float], obs_size: int | None = None,
                    act_size: int | None = None) -> "MirrorSpec":
        oi, os_ = _parse(obs, obs_size, "observation")
        ai, as_ = _parse(act, act_size, "action")
        return cls(oi, os_, ai, as_)

    @classmethod
    def load(cls, source: str, env_id: str, obs_size: int, act_size: int,
             env_mirror: Callable[[], EnvMirrorIndices | None] = no_env_mirror) -> "MirrorSpec":
        """``source``: "auto" (the built-in spec for ``env_id``, else the env's own indices, which
        ``env_mirror`` reads, only then) or a YAML file with ``obs:`` and ``act:``."""
        if source == "auto":
            family = env_id.split(":")[-1].split("-")[0]
            if family not in BUILT_IN:
                indices = env_mirror()
                if indices is not None:
                    return indices.spec(obs_size, act_size)
                raise ConfigError(f"no built-in mirror spec for {env_id!r} (there are {sorted(BUILT_IN)}) and the env "
                                  f"defines no {OBS_METHOD}() and {ACT_METHOD}(): give ppo.mirror_spec=FILE.yaml "
                                  "with obs: and act: lists")
            data = BUILT_IN[family]
        else:
            path = Path(source)
            if not path.is_file():
                raise ConfigError(f"mirror spec file {source!r} not found")
            data = yaml.safe_load(path.read_text()) or {}
            if not isinstance(data, dict) or set(data) != {"obs", "act"}:
                raise ConfigError(f"mirror spec file {source!r} must hold exactly two lists, obs: and act:")
        return cls.from_config(data["obs"], data["act"], obs_size, act_size)

    def torch(self, device: torch.device | None = None) -> "TorchMirror":
        return TorchMirror(self, device)


class TorchMirror:
    """The reflection as tensor ops on ``device`` (the learner's; None: the CPU): ``obs(x)`` and ``act(a)``
    mirror the last dimension."""

    def __init__(self, spec: MirrorSpec, device: torch.device | None = None):
        self.spec = spec
        self.obs_index = torch.as_tensor(spec.obs_index, device=device)
        self.obs_sign = torch.as_tensor(spec.obs_sign, dtype=torch.float32, device=device)
        self.act_index = torch.as_tensor(spec.act_index, device=device)
        self.act_sign = torch.as_tensor(spec.act_sign, dtype=torch.float32, device=device)

    def to(self, device: torch.device) -> "TorchMirror":
        """The same reflection on ``device``."""
        return TorchMirror(self.spec, device)

    def obs(self, x: torch.Tensor) -> torch.Tensor:
        return x[..., self.obs_index] * self.obs_sign

    def act(self, a: torch.Tensor) -> torch.Tensor:
        return a[..., self.act_index] * self.act_sign


class NormalizedMirror:
    """The reflection of *normalised* observations: un-normalise, reflect, normalise again.

    Reflecting normalised values directly would be wrong unless the statistics are themselves
    symmetric (a left knee's mean angle need not equal the right's, and a negated entry's mean
    does not negate), so the raw observation is reflected, with the statistics of this update (on the
    mirror's device).
    """

    def __init__(self, mirror: TorchMirror, rms):
        self.mirror, self.act = mirror, mirror.act
        device = mirror.obs_sign.device
        self.mean = torch.as_tensor(rms.mean, dtype=torch.float32, device=device).reshape(-1)
        self.std = torch.as_tensor(rms.std, dtype=torch.float32, device=device).reshape(-1)
        self.clip = rms.clip

    def obs(self, x: torch.Tensor) -> torch.Tensor:
        raw = x * self.std + self.mean
        return ((self.mirror.obs(raw) - self.mean) / self.std).clamp(-self.clip, self.clip)


def mirror_loss(mean_action: Callable[[torch.Tensor], torch.Tensor], obs: torch.Tensor,
                mirror: TorchMirror) -> torch.Tensor:
    """MSE between the policy's action for each state and the mirror of its action for the mirrored
    state: zero exactly when the policy commutes with the reflection."""
    return (mean_action(obs) - mirror.act(mean_action(mirror.obs(obs)))).pow(2).mean()


def mirror_terms(model: Any, obs: torch.Tensor, out: torch.Tensor, value: torch.Tensor, reflect: Any, *,
                 discrete: bool, critic: bool, mask: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
    """PPO's mirror terms for its actor-critic (policy/actor_critic.py; with ``mask``, the [B, L] real steps of
    padded sequences, the recurrent one of policy/recurrent.py): the MSE between the mean action for s (from
    ``out``, the actor's output for ``obs``, real steps only) and the mirror of the mean action for mirror(s)
    (``reflect``: a TorchMirror or NormalizedMirror); with ``critic`` also between V(s) (``value``) and
    V(mirror(s)). Mean actions of ``discrete`` actions are the probabilities."""
    mirrored_obs = reflect.obs(obs)
    if mask is not None:
        # A recurrent policy is symmetric when mirrored histories give mirrored actions. The state
        # stored at a chunk's first step sums up a history whose mirror was never run, so the two
        # sides are compared from the same episode-start (zero) state instead: the term is then
        # exactly 0 for a symmetric policy wherever the chunk starts (the original side differs
        # from ``out`` only for chunks that start mid-episode). Storing a mirrored state as well
        # would double the network's work while collecting, for a term that only regularises.
        both = torch.cat([obs, mirrored_obs])  # one pass over [2B, L] sequences
        both_out, both_value, _ = model(both, model.initial_state(len(both)), critic=critic)
        out, mirrored_out = (x[mask] for x in both_out.chunk(2))
        if critic:
            value, mirrored_value = (x[mask] for x in both_value.chunk(2))
        else:
            mirrored_value = None
    else:
        mirrored_out, mirrored_value = model.actor_critic(mirrored_obs) if critic else (model.actor(mirrored_obs), None)
    mean, mirrored_mean = (x.softmax(-1) if discrete else x for x in (out, mirrored_out))
    terms = {"loss/mirror": (mean - reflect.act(mirrored_mean)).pow(2).mean()}
    if mirrored_value is not None:
        terms["loss/mirror_critic"] = (value - mirrored_value).pow(2).mean()
    return terms
