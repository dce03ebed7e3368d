"""Algorithm lookup: each algorithm file ends with ``register(name, ConfigClass, AlgoClass, PolicyClass)``.

The policy class is built apart from its algorithm (``entry.build_policy(cfg, obs_space, act_space)``):
rollout workers, evaluators, remote workers and deployment need the policy only, never the
optimisers and target networks of the algorithm.

Your own algorithm is named by reference, ``"package.module:name"``: the module calls
``register("name", ...)`` when it is imported, and ``get_algo("package.module:name")`` imports it
first, so every process (mp and Ray rollout workers, ``relayrl eval``, ``relayrl worker``) finds the
algorithm by importing the module by name, as it does for ``"module:EnvId"`` env ids. The built-ins
(modules of the relayrl package) register plain names (``ppo``); any other module's ``register``
files the entry under ``"module:name"``. The config section of either is ``name`` (``ppo:``,
``reinforce:``).
"""

from __future__ import annotations

import difflib
import importlib

from relayrl.algos import registry
from relayrl.algos.registry import AlgoEntry, register
from relayrl.errors import ConfigError
from relayrl.usercode import import_module

__all__ = ["BUILTIN", "AlgoEntry", "available", "get_algo", "register"]

BUILTIN = ("ppo", "appo", "dqn", "sac", "td3", "redq", "crossq", "a2c", "pqn", "bc", "iql")


def available() -> list[str]:
    for name in BUILTIN:
        importlib.import_module(f"relayrl.algos.{name}")
    return sorted(registry.REGISTERED)


def get_algo(name: str) -> AlgoEntry:
    """The entry of a built-in (``"ppo"``) or of a reference (``"package.module:name"``, imported first)."""
    if ":" in name:
        return _by_reference(name)
    names = available()
    if name not in registry.REGISTERED:
        refs = [key for key in names if key.endswith(f":{name}")]
        close = refs or difflib.get_close_matches(name, names, n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        raise ConfigError(f"unknown algorithm {name!r}: {hint}available: {', '.join(names)}, or your own as "
                          "'package.module:name' (docs/library.md)")
    return registry.REGISTERED[name]


def _by_reference(ref: str) -> AlgoEntry:
    module, _, name = ref.partition(":")
    if not all(part.isidentifier() for part in module.split(".")) or not name.isidentifier():
        raise ConfigError(f"algorithm {ref!r}: expected 'package.module:name', the module that calls "
                          "relayrl.algos.register(name, ...) and the name it registers")
    if ref not in registry.REGISTERED:
        import_module(module, f"algorithm {ref!r}")  # (register()'s own ConfigError passes through)
    if ref not in registry.REGISTERED:
        theirs = [key.partition(":")[2] for key in registry.REGISTERED if key.partition(":")[0] == module]
        has = f"it registers {', '.join(map(repr, theirs))}" if theirs else "it registers no algorithm"
        raise ConfigError(f"algorithm {ref!r}: module {module!r} does not register {name!r} ({has}): call "
                          f"relayrl.algos.register({name!r}, Config, Algorithm, Policy, on_policy=...) at the top "
                          "level of that module")
    return registry.REGISTERED[ref]
