"""The registry of algorithms: ``register(name, ConfigClass, AlgoClass, PolicyClass)`` files an ``AlgoEntry``.

Each algorithm's module calls ``register`` at its top level; relayrl/algos/__init__.py looks entries up
(``get_algo``), importing the module that registers one first. This module imports no algorithm, so the
algorithms import it without a circle.
"""

from __future__ import annotations

import inspect
import sys
from dataclasses import dataclass, field
from typing import Any

from relayrl.errors import ConfigError, EnvError


@dataclass(frozen=True)
class AlgoEntry:
    name: str  # the name it registered, which is also its config section (``ppo:``, ``reinforce:``)
    config_cls: type
    algo_cls: type
    policy_cls: type
    on_policy: bool
    defaults: dict = field(default_factory=dict)  # overrides of the common options, e.g. {"env": {"num_envs": 1}}
    asynchronous: bool = False  # on-policy learning from chunks of older versions (APPO): workers never wait
    offline: bool = False  # learns from a dataset only, no env steps (BC, IQL: training/offline.py)

    def build_algorithm(self, cfg: Any, obs_space: Any, act_space: Any, num_envs: int) -> Any:
        """The algorithm (and its policy) for envs of these spaces: ``relayrl.core.Algorithm.__init__``."""
        self.check_actions(act_space)
        return self.algo_cls(cfg=cfg, obs_space=obs_space, act_space=act_space, num_envs=num_envs)

    def build_policy(self, cfg: Any, obs_space: Any, act_space: Any) -> Any:
        """The policy alone, as the algorithm would build it from ``cfg`` and the env's spaces."""
        self.check_actions(act_space)
        return self.policy_cls(obs_space=obs_space, act_space=act_space, cfg=cfg)

    def check_actions(self, act_space: Any) -> None:
        """Refuse a hybrid action space (relayrl/envs/hybrid.py) for a policy without ``hybrid_actions``."""
        from relayrl.envs.hybrid import hybrid_layout

        if hybrid_layout(act_space) is not None and not self.policy_cls.hybrid_actions:
            raise EnvError(f"{self.name} cannot act in the hybrid action space {act_space} (continuous values and "
                           "discrete branches in one action): ppo, appo and a2c take hybrid actions; train with one "
                           "of them, or give the behaviour one kind of action")

    def check_learners(self, learners: int) -> None:
        """Refuse ``learners`` > 1 for an algorithm whose class does not declare ``data_parallel`` (relayrl.core's
        Algorithm: it must average its gradients through ``self.learners``); one learner is always fine."""
        if learners < 1:
            raise ConfigError(f"learners={learners}: at least one learner trains the policy; set learners=1 or more")
        if learners > 1 and not self.algo_cls.data_parallel:
            raise ConfigError(f"{self.name} cannot learn with {learners} learners: its algorithm class "
                              f"{self.algo_cls.__qualname__} does not declare data_parallel = True (it would have to "
                              "average its gradients over the learners before every optimiser step: relayrl.core.Algorithm"
                              "'s docstring, docs/library.md \"Your own algorithm\"); set learners=1, or train with ppo, "
                              "appo, dqn or sac")

    @property
    def collect_on_request(self) -> bool:
        """Rollout workers collect one chunk per published version (synchronous on-policy)."""
        return self.on_policy and not self.asynchronous


REGISTERED: dict[str, AlgoEntry] = {}  # by key: the name (built-ins) or "module:name"


def register(name: str, config_cls: type, algo_cls: type, policy_cls: type, *, on_policy: bool,
             defaults: dict | None = None, asynchronous: bool = False, offline: bool = False) -> AlgoEntry:
    """Register an algorithm under ``name`` (a module of relayrl) or ``"module:name"`` (any other module).

    Called at the top level of the algorithm's module. The classes are checked here: a config that is
    no ``AlgoConfig``, a class that is not a ``relayrl.core`` Algorithm or Policy or that leaves one of
    their abstract methods undefined is a ConfigError naming the class and the methods.
    """
    module = sys._getframe(1).f_globals.get("__name__", "")
    key = name if module == "relayrl" or module.startswith("relayrl.") else f"{module}:{name}"
    _check(key, name, config_cls, algo_cls, policy_cls, on_policy, offline)
    entry = AlgoEntry(name, config_cls, algo_cls, policy_cls, on_policy, defaults or {}, asynchronous, offline)
    REGISTERED[key] = entry
    return entry


def _check(key: str, name: str, config_cls: type, algo_cls: type, policy_cls: type, on_policy: bool,
           offline: bool = False) -> None:
    from relayrl.core import Algorithm, Policy
    from relayrl.options import AlgoConfig, OfflineConfig, ReplayLoopConfig, RunConfig

    where = f"algorithm {key!r}: register({name!r}, ...)"
    if not name.isidentifier() or name.startswith(("_", "model_")) or name in RunConfig.model_fields \
            or hasattr(RunConfig, name):
        raise ConfigError(f"{where}: {name!r} cannot name a config section (it must be a Python identifier, not "
                          f"one of {', '.join(RunConfig.model_fields)} or a pydantic attribute): register it under "
                          "another name")
    if not (isinstance(config_cls, type) and issubclass(config_cls, AlgoConfig)):
        raise ConfigError(f"{where}: the config class {_qualname(config_cls)} is not a relayrl.config.AlgoConfig: "
                          f"subclass AlgoConfig (its fields become the {name}: section)")
    if on_policy and "num_steps" not in config_cls.model_fields:
        raise ConfigError(f"{where}: the config class {_qualname(config_cls)} has no num_steps, the rollout "
                          "length on-policy collection needs: add `num_steps: int = Field(64, ge=1)`")
    if offline and (on_policy or not issubclass(config_cls, OfflineConfig)):
        raise ConfigError(f"{where}: an offline algorithm (offline=True, on_policy=False) needs a config class that "
                          f"subclasses relayrl.options.OfflineConfig (the offline loop's options); "
                          f"{_qualname(config_cls)} does not")
    if not on_policy and not offline and not issubclass(config_cls, ReplayLoopConfig):
        raise ConfigError(f"{where}: an off-policy algorithm's config class must subclass "
                          f"relayrl.config.ReplayLoopConfig (the replay loop's options); "
                          f"{_qualname(config_cls)} does not")
    for cls, base in ((algo_cls, Algorithm), (policy_cls, Policy)):
        kind = base.__name__.lower()
        if not (isinstance(cls, type) and issubclass(cls, base)):
            raise ConfigError(f"{where}: the {kind} class {_qualname(cls)} does not subclass "
                              f"relayrl.core.{base.__name__}: derive it from {base.__name__} and define "
                              f"{', '.join(sorted(base.__abstractmethods__))}")
        missing = sorted(getattr(cls, "__abstractmethods__", ()))
        if missing:
            raise ConfigError(f"{where}: the {kind} class {_qualname(cls)} does not define "
                              f"{', '.join(missing)} (abstract in relayrl.core.{base.__name__}): define "
                              f"{'it' if len(missing) == 1 else 'them'} (relayrl/core.py documents each)")
    for cls, kind, params in ((algo_cls, "algorithm", ALGORITHM_PARAMETERS), (policy_cls, "policy", POLICY_PARAMETERS)):
        try:
            inspect.signature(cls).bind(**dict.fromkeys(params))
        except TypeError:
            raise ConfigError(f"{where}: the {kind} class {_qualname(cls)} is built as {cls.__name__}("
                              f"{', '.join(params)}), but its constructor takes ({_parameters(cls)}): give its "
                              f"__init__ these parameters (relayrl/core.py, Algorithm.__init__)") from None
    if on_policy and policy_cls.value is Policy.value:
        raise ConfigError(f"{where}: the policy class {_qualname(policy_cls)} does not define value(obs), which "
                          "on-policy collection bootstraps from: define it (the critic's V(obs))")


ALGORITHM_PARAMETERS = ("cfg", "obs_space", "act_space", "num_envs")  # relayrl.core.Algorithm.__init__
POLICY_PARAMETERS = ("obs_space", "act_space", "cfg")  # how build_policy builds the policy class


def _parameters(cls: type) -> str:
    return ", ".join(name for name in inspect.signature(cls).parameters)


def _qualname(obj: Any) -> str:
    if isinstance(obj, type):
        return f"{obj.__module__}.{obj.__qualname__}"
    return repr(obj)
