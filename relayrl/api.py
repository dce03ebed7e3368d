"""relayrl from Python: ``relayrl.training`` (the config entry) and ``relayrl.load`` (a policy to deploy).

    import relayrl

    run = relayrl.train("ppo", "CartPole-v1", {"ppo": {"epochs": 5}}, total_steps=50_000)
    print(run.summary["best_eval_return"], run.run_dir)
    policy = relayrl.load(run.run_dir)
    action = policy.predict(obs)

The components (envs, collectors, replay, algorithms, the evaluator) compose in a plain loop as
well: docs/library.md shows one.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import gymnasium as gym

from relayrl.config import build_config, read_yaml
from relayrl.core import Policy
from relayrl.errors import ConfigError
from relayrl.io.rundir import check_fresh_run_dir
from relayrl.options import RunConfig

EnvLike = str | Callable[[], gym.Env]

__all__ = ["Run", "train", "load"]


@dataclass(frozen=True)
class Run:
    """What ``train`` returns: the summary (the keys of summary.json) and where the run was written."""

    summary: dict[str, Any]
    run_dir: Path

    def load(self, which: str = "best") -> Policy:
        """The run's policy (``best`` or ``last`` checkpoint)."""
        return load(self.run_dir / "checkpoints" / f"{which}.safetensors")


def train(algo: str, env: EnvLike | None = None, config: dict[str, Any] | str | Path | RunConfig | None = None, *,
          run_dir: str | Path | None = None, total_steps: int | None = None, stop_value: float | None = None,
          train_iter: int | None = None, time_limit_s: float | None = None, seed: int | None = None, backend: str | None = None, workers: int | None = None,
          learners: int | None = None, resume: bool = False, previous: str | Path | None = None, quiet: bool = True,
          tensorboard: bool = True) -> Run:
    """Train ``algo`` (e.g. "ppo") on ``env`` and return the run's summary and directory.

    Args:
        env: a Gymnasium id ("CartPole-v1"), ``"package.module:EnvId"`` (the module registers it),
            ``"package.module:make_env"`` (a function of the module returning a ``gymnasium.Env``), or
            that function itself. A function defined at the top of an importable module works with
            every backend and env manager (each process imports it by name); one defined in a script
            or inside a function is used in this process only (``env.manager`` sync, one worker).
            None: the config's ``env.id``.
        config: options as a dict (the YAML layout: ``{"ppo": {"epochs": 5}, "env": {"num_envs": 4}}``, or
            dotted keys as ``--set`` spells them: ``{"ppo.epochs": 5}``), a YAML file, or a ``RunConfig``; the
            keyword arguments override it.
        run_dir: a new or empty folder (default ``runs/<env>_<algo>_<timestamp>``, new each call); a folder
            holding another run is refused (a ``CheckpointError``) unless ``resume`` continues that run.
        train_iter, time_limit_s: also stop after this many updates (gradient steps), or once the run's wall
            time reaches this many seconds, whichever of the stops comes first (summary's ``stop_reason``).
        learners: data-parallel learner processes (RunConfig.learners; docs/distributed.md "Learners").
        resume: continue the run in ``run_dir``; one with nothing left to do (its ``total_steps`` reached)
            trains nothing, logs why, and returns its summary.
    """
    overrides = {"total_steps": total_steps, "stop_value": stop_value, "train_iter": train_iter,
                 "time_limit_s": time_limit_s, "seed": seed, "backend": backend, "workers": workers,
                 "learners": learners}
    cfg, local = run_config(algo, env, config, overrides)
    if cfg.net.local_refusal() is not None:
        raise ConfigError(cfg.net.local_refusal())
    if run_dir is not None and not resume:
        check_fresh_run_dir(Path(run_dir))  # before any env, worker or simulator starts
    if local:
        if cfg.resolved_backend != "inline" or cfg.workers != 1 or cfg.learners != 1:
            raise ConfigError(f"env factory {env!r} is defined where other processes cannot import it (a script "
                              "or a function): move it to the top of an importable module to use workers or "
                              "learners, or train with one inline worker and one learner")
        cfg = cfg.model_copy(update={"env": cfg.env.model_copy(update={"manager": "sync"})})
    from relayrl import launch
    from relayrl.training.stops import StopRequest, stop_on_sigterm

    stop = StopRequest()
    with stop_on_sigterm(stop):  # a scheduler's SIGTERM: the last checkpoint and the summary, then the exit
        summary = launch.run(cfg, run_dir=run_dir, resume=resume, previous=previous, quiet=quiet,
                             tensorboard=tensorboard, stop_event=stop)
    if summary["stop_reason"] == "terminated":
        raise SystemExit(143)  # the process was told to end: it does, once the run is saved
    return Run(summary=summary, run_dir=Path(summary["run_dir"]))


def run_config(algo: str, env: EnvLike | None, config: dict[str, Any] | str | Path | RunConfig | None,
               overrides: dict[str, Any]) -> tuple[RunConfig, bool]:
    """The RunConfig of ``train``'s (and ``relayrl.remote.Worker``'s) arguments, and whether the env only
    exists in this process (a factory defined in a script or a function)."""
    if isinstance(config, RunConfig):
        if config.algo != algo:
            raise ConfigError(f"the config is for {config.algo!r}, not {algo!r}: pass a config of {algo!r}")
        data: dict[str, Any] = config.model_dump()
    elif isinstance(config, (str, Path)):
        data = read_yaml(Path(config))
    else:
        data = dict(config or {})
    env_id, local = _env_id(env) if env is not None else (None, False)
    overrides = {**overrides, "env.id": env_id}
    return build_config(algo, data, (), overrides), local


def load(path: str | Path, behaviour: str | None = None) -> Policy:
    """The policy of a run directory (its best checkpoint, else the last) or of a checkpoint file; of a run that
    trained several behaviours of a simulator, the policy of ``behaviour``.

    Only the policy is built (no optimisers, no target networks); ``policy.predict(obs)`` acts
    deterministically on one observation or a batch.
    """
    from relayrl.training.saved_policy import behaviour_checkpoint, load_policy

    policy, _, _ = load_policy(behaviour_checkpoint(path, behaviour)[0])
    return policy


def _env_id(env: EnvLike) -> tuple[str, bool]:
    """(the env id to record in the config, whether it only exists in this process)."""
    if isinstance(env, str):
        return env, False
    if not callable(env):
        raise ConfigError(f"env must be a Gymnasium id or a function returning a gymnasium.Env, got {env!r}")
    module, name = getattr(env, "__module__", None), getattr(env, "__qualname__", "")
    importable = module not in (None, "__main__") and "<" not in name and "." not in name
    if importable:
        try:
            importable = getattr(importlib.import_module(module), name, None) is env
        except ImportError:
            importable = False
    if importable:
        return f"{module}:{name}", False
    from relayrl.envs.registry import FACTORY_NAMESPACE

    env_id = f"{FACTORY_NAMESPACE}/local.{name.replace('<', '').replace('>', '').replace('.', '_')}-v0"
    if env_id in gym.registry:
        del gym.registry[env_id]
    gym.register(env_id, entry_point=env, disable_env_checker=True)
    return env_id, True
