"""Algorithm registry: each algorithm file ends with ``register(name, ConfigClass, AlgoClass, PolicyClass)``.

The policy class is built apart from its algorithm (``entry.build_policy(cfg, obs_space, act_space)``):
rollout workers, evaluators, remote workers and deployment need the policy only, never the
optimisers and target networks of the algorithm.
"""

from __future__ import annotations

import difflib
import importlib
from dataclasses import dataclass, field
from typing import Any

from relayrl.errors import ConfigError

BUILTIN = ("ppo", "appo", "dqn", "sac")


@dataclass(frozen=True)
class AlgoEntry:
    name: str
    config_cls: type
    algo_cls: type
    policy_cls: type
    on_policy: bool
    defaults: dict = field(default_factory=dict)  # overrides of the common options, e.g. {"env": {"num_envs": 1}}
    asynchronous: bool = False  # on-policy learning from chunks of older versions (APPO): workers never wait

    def build_policy(self, cfg: Any, obs_space: Any, act_space: Any) -> Any:
        """The policy alone, as the algorithm would build it from ``cfg`` and the env's spaces."""
        return self.policy_cls(obs_space, act_space, cfg)

    @property
    def collect_on_request(self) -> bool:
        """Rollout workers collect one chunk per published version (synchronous on-policy)."""
        return self.on_policy and not self.asynchronous


_REGISTRY: dict[str, AlgoEntry] = {}


def register(name: str, config_cls: type, algo_cls: type, policy_cls: type, *, on_policy: bool,
             defaults: dict | None = None, asynchronous: bool = False) -> None:
    _REGISTRY[name] = AlgoEntry(name, config_cls, algo_cls, policy_cls, on_policy, defaults or {}, asynchronous)


def available() -> list[str]:
    for name in BUILTIN:
        importlib.import_module(f"relayrl.algos.{name}")
    return sorted(_REGISTRY)


def get_algo(name: str) -> AlgoEntry:
    names = available()
    if name not in _REGISTRY:
        close = difflib.get_close_matches(name, names, n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        raise ConfigError(f"unknown algorithm {name!r}: {hint}available: {', '.join(names)}")
    return _REGISTRY[name]
