"""The on-policy training driver: collect a rollout, learn from it, evaluate, checkpoint, repeat.

``train(config)`` is what ``relayrl train`` runs; tests and benchmarks call it directly. It writes
the run directory described in DESIGN.md and returns the summary.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import torch

from relayrl.algos import get_algo
from relayrl.config import RunConfig, save_config
from relayrl.envs.registry import spec_stop_value
from relayrl.envs.vector import make_vec
from relayrl.envs.agents import AgentEnv
from relayrl.envs.auto import choose_manager
from relayrl.errors import CheckpointError, ConfigError, NonFiniteError
from relayrl.io.checkpoint import explain_load_error, load_checkpoint, load_newest, save_checkpoint
from relayrl.io.metrics import MetricsLogger
from relayrl.io.rundir import RunLock, clean_stale_temps, new_run_dir, write_summary
from relayrl.training.agents import AgentEvaluator, AgentRolloutCollector, AgentTransitionCollector
from relayrl.training.collector import OnPolicyCollector
from relayrl.training.evaluator import Evaluator
from relayrl.training.learner import HookContext, Learner
from relayrl.training.offpolicy import OffPolicySource
from relayrl.training.progress import ProgressDisplay
from relayrl.training.threads import resolve_threads

log = logging.getLogger("relayrl")

EVAL_SEED_OFFSET = 10_000
RESUME_SEED_OFFSET = 1_000_003


@dataclass
class RunState:
    """Counters and results that survive a resume (stored in every checkpoint's meta)."""

    env_steps: int = 0
    updates: int = 0
    iteration: int = 0
    wall_time_s: float = 0.0
    best_eval_return: float | None = None
    last_eval_return: float | None = None
    last_eval_steps: int = -1
    time_to_stop_value_s: float | None = None
    env_steps_to_stop_value: int | None = None
    eval_count: int = 0
    resumes: int = 0


def train(config: RunConfig, *, run_dir: Path | str | None = None, resume: bool = False,
          previous: Path | str | None = None, quiet: bool = True, tensorboard: bool = True,
          stop_event: threading.Event | None = None,
          hooks: Sequence[tuple[str, Callable[[HookContext], None], dict[str, Any]]] = (),
          samples: Any = None, publish: Callable[[dict, int], None] | None = None,
          make_envs: Callable[[RunConfig], tuple[Any, Any]] | None = None) -> dict[str, Any]:
    """Train ``config.algo`` on ``config.env.id`` until the stop value or ``total_steps``.

    Args:
        run_dir: where to write the run (default ``runs/<env>_<algo>_<timestamp>``).
        resume: continue the run in ``run_dir`` from its last checkpoint.
        previous: start from this checkpoint's policy weights (and normaliser) only.
        stop_event: when set (e.g. by Ctrl-C), training stops after the current iteration,
            writing the last checkpoint and the summary.
        hooks: extra learner hooks as ``(position, fn, options)``, e.g.
            ``("after_iter", print_kl, {"freq": 10, "priority": 50})``; ``fn`` gets a HookContext.
        samples: the source of experience (``reset``, ``pull``, ``pop_episodes``; see
            ``OffPolicyCollector``) instead of the local envs, e.g. a queue fed by remote workers.
            Off-policy: ``pull()`` returns transitions; on-policy: a [T, N] rollout collected with
            the weights last published.
        publish: called with ``(weights, version)`` at the start, then every
            ``update_model_interval`` updates (off-policy) or before every rollout (on-policy).
        make_envs: builds (training env, evaluation env) instead of Gymnasium vector envs, e.g. the
            agent envs of a simulator bridge (``relayrl/training/agents.py``).
    """
    entry = get_algo(config.algo)
    if entry.on_policy and (samples is None) != (publish is None):
        raise ConfigError(f"{config.algo} is on-policy: a sample source needs a weight sink (samples= and "
                          "publish= together), so every rollout is collected with the weights just published")
    algo_cfg = config.algo_config
    stop_value = config.stop_value if config.stop_value is not None or make_envs is not None \
        else spec_stop_value(config.env.id)
    if resume and run_dir is None:
        raise CheckpointError("resume needs the run directory to continue")
    run_dir = Path(run_dir) if run_dir is not None else new_run_dir(config.env.id, config.algo)
    if config.threads > 0:  # (-1 is resolved below, by timing the algorithm once it exists)
        torch.set_num_threads(config.threads)
    torch.manual_seed(config.seed)
    np.random.seed(config.seed)

    # everything that can fail on bad input happens before the run directory is written
    if make_envs is not None:
        venv, eval_venv = make_envs(config)
    else:
        env_args = _env_setup(config, entry.on_policy)
        venv = make_vec(config.env.id, config.env.num_envs, **env_args)
        eval_venv = None
    agents = isinstance(venv, AgentEnv)  # agents as rows, each deciding when it needs to
    lock: RunLock | None = None
    try:
        if eval_venv is None:
            eval_venv = make_vec(config.env.id, min(config.eval.num_envs, config.eval.episodes), **env_args)
        columns = config.env.num_envs * (config.workers if samples is not None else 1)  # envs in a rollout
        if agents:
            columns = 1  # AgentRolloutCollector: every agent's steps in one column
            if getattr(algo_cfg, "prenorm", False):
                raise ConfigError(f"{config.algo}.prenorm does not apply to agent envs (a simulator bridge): "
                                  "set it to false")
            if getattr(algo_cfg, "recurrent", None):
                raise ConfigError(f"{config.algo}.recurrent: agent envs (a simulator bridge) do not carry a hidden "
                                  f"state per agent yet: set {config.algo}.recurrent=null")
        algo_cfg.check(config.algo)  # combinations of options that would silently do nothing, e.g. PPO's prenorm
        algo = entry.algo_cls(algo_cfg, venv.single_observation_space, venv.single_action_space, columns)
        algo.bind_env(config.env.id)  # what depends on the env itself, e.g. PPO's built-in mirror specs
        if config.threads == -1:  # before config.yaml is written, so it records the pick
            config = resolve_threads(config, algo)
            torch.set_num_threads(config.threads)
        state, source_state = RunState(), {}
        if resume:  # the lock first: no other process may be training in the run we restore
            lock = RunLock(run_dir).acquire()
            state, source_state = _restore(run_dir, algo)
        elif previous is not None:
            _load_previous(previous, algo, config)
    except BaseException:
        if lock is not None:
            lock.release()
        venv.close()
        if eval_venv is not None:
            eval_venv.close()
        raise
    if lock is None:
        lock = RunLock(run_dir).acquire()  # (creates the run directory)
    (run_dir / "checkpoints").mkdir(parents=True, exist_ok=True)
    save_config(config, run_dir / "config.yaml")

    if entry.on_policy:
        source: Any = _OnPolicySource(algo, venv, algo_cfg, samples, publish)
    else:
        if agents and samples is None:
            samples = AgentTransitionCollector(venv, algo.policy, algo_cfg.gamma, algo_cfg.steps_per_iteration,
                                               algo_cfg.n_step)
        source = OffPolicySource(algo, venv, algo_cfg, seed=config.seed, total_steps=config.total_steps,
                                 samples=samples, publish=publish)
        if resume:
            source.restore(run_dir / "checkpoints", source_state)
    source.reset(seed=config.seed + RESUME_SEED_OFFSET * state.resumes)
    if publish is not None and not entry.on_policy:  # remote collectors start from the learner's weights
        publish(algo.policy.get_weights(), algo.policy.version)
    evaluator: Any = (AgentEvaluator if agents else Evaluator)(eval_venv, config.eval.episodes,
                                                              seed=config.seed + EVAL_SEED_OFFSET)
    evaluator.count = state.eval_count
    logger = MetricsLogger(run_dir, tensorboard=tensorboard)
    learner = Learner(algo if entry.on_policy else source.learning,
                      HookContext(env_steps=state.env_steps, updates=state.updates, iteration=state.iteration))
    display = ProgressDisplay(config.total_steps, f"{config.algo} {config.env.id}", quiet, start=state.env_steps,
                              stop_value=stop_value)
    start = time.perf_counter()
    wall_offset = state.wall_time_s

    def wall() -> float:
        return wall_offset + time.perf_counter() - start

    def checkpoint(name: str) -> None:
        state.env_steps, state.updates, state.iteration = learner.ctx.env_steps, learner.ctx.updates, learner.ctx.iteration
        state.wall_time_s, state.eval_count = wall(), evaluator.count
        meta = {"algo": config.algo, "env": config.env.id, "config": config.model_dump(), "run": vars(state),
                "source": source.state()}
        if name == "last":  # what a resume needs besides the learner (the replay buffer, if any) goes first,
            source.save(run_dir / "checkpoints")  # so a last checkpoint never lacks it
        save_checkpoint(run_dir / "checkpoints" / name,
                        {"algo": algo.state_dict(), "rng": {"torch": torch.get_rng_state()}}, meta)

    def evaluate() -> bool:
        result = evaluator.evaluate(algo.policy)
        state.last_eval_return, state.last_eval_steps = result.mean, learner.ctx.env_steps
        logger.log("eval", learner.ctx.env_steps, wall(), {
            "eval/return_mean": result.mean, "eval/return_std": result.std,
            "eval/length_mean": float(result.lengths.mean()), "eval/episodes": len(result.returns)})
        improved = state.best_eval_return is None or result.mean > state.best_eval_return
        if improved:
            state.best_eval_return = result.mean
        reached = stop_value is not None and result.mean >= stop_value
        if reached and state.time_to_stop_value_s is None:
            state.time_to_stop_value_s, state.env_steps_to_stop_value = wall(), learner.ctx.env_steps
        checkpoint("last")  # before best: a run is resumable from its first checkpoint on, whenever it dies
        if improved:
            checkpoint("best")
        return reached

    # ---- hooks: logging every iteration, periodic checkpoints every save_freq updates
    timing = {"collect_s": 0.0, "learn_s": 0.0, "steps": 0}

    def log_iteration(ctx: HookContext) -> None:
        returns, lengths = source.pop_episodes()
        elapsed = timing["collect_s"] + timing["learn_s"]
        values: dict[str, Any] = {f"train/{k}": v for k, v in ctx.metrics.items()}
        values.update({f"env/{k}": v for k, v in venv.stats.items()})
        if samples is not None:
            values.update(samples.stats())
        values.update({"updates": ctx.updates, "iteration": ctx.iteration,
                       "time/collect_s": timing["collect_s"], "time/learn_s": timing["learn_s"],
                       "time/steps_per_s": timing["steps"] / elapsed if elapsed else 0.0,
                       "time/updates_per_s": ctx.metrics.get("updates", 1) / timing["learn_s"] if timing["learn_s"] else 0.0})
        if returns:
            values.update({"train/return_mean": float(np.mean(returns)),
                           "train/length_mean": float(np.mean(lengths)), "train/episodes": len(returns)})
        logger.log("train", ctx.env_steps, wall(), values)

    last_periodic = {"updates": state.updates}

    def periodic_checkpoint(ctx: HookContext) -> None:
        if config.save_freq > 0 and ctx.updates // config.save_freq > last_periodic["updates"] // config.save_freq:
            checkpoint(f"update_{ctx.updates:09d}")
            last_periodic["updates"] = ctx.updates

    learner.register_hook("after_iter", log_iteration, priority=10)
    learner.register_hook("after_iter", periodic_checkpoint, priority=20)
    for position, fn, options in hooks:
        learner.register_hook(position, fn, **options)

    # ---- the loop
    ctx = learner.ctx
    stop_reason = "total_steps"
    work = None
    try:
        learner.call_hooks("before_run")
        if getattr(algo_cfg, "prenorm", False) and not resume and algo.policy.obs_rms is not None:
            ctx.env_steps += source.collector.warmup(algo_cfg.prenormalize_steps)
        next_eval = _next_multiple(ctx.env_steps, config.eval.freq)
        while ctx.env_steps < config.total_steps:
            if stop_event is not None and stop_event.is_set():
                stop_reason = "interrupted"
                break
            t0 = time.perf_counter()
            work, steps = source.gather(ctx.env_steps, ctx.updates)  # a rollout, or a number of replay updates
            t1 = time.perf_counter()
            ctx.env_steps += steps
            timing["collect_s"], timing["steps"] = t1 - t0, steps
            learner.train(work, progress=ctx.env_steps / config.total_steps)
            late = source.steps_received_while_learning()  # a polling source's mid-round samples
            ctx.env_steps += late
            timing["learn_s"], timing["steps"] = time.perf_counter() - t1, steps + late
            rate = timing["steps"] / (timing["collect_s"] + timing["learn_s"])
            if config.eval.freq and ctx.env_steps >= next_eval:
                next_eval = _next_multiple(ctx.env_steps, config.eval.freq)
                if evaluate():
                    stop_reason = "stop_value"
                    break
            display.update(ctx.env_steps, rate, state.last_eval_return)
        if stop_reason == "total_steps" and state.last_eval_steps != ctx.env_steps:
            if evaluate():
                stop_reason = "stop_value"
        if stop_reason == "interrupted":
            checkpoint("last")
        learner.ctx.stop_reason = stop_reason
        learner.call_hooks("after_run")
    except KeyboardInterrupt:
        stop_reason = "interrupted"  # a second Ctrl-C: stop now, keep the checkpoints already written
        raise
    except NonFiniteError:
        stop_reason = "nonfinite"
        if isinstance(work, dict):
            np.savez(run_dir / "nonfinite_batch.npz", **work)
        raise
    except Exception:
        stop_reason = "error"  # e.g. an env that keeps failing; the checkpoints written so far stay
        raise
    finally:
        display.close(ctx.env_steps, state.last_eval_return, solved=stop_reason == "stop_value")
        logger.close()
        venv.close()
        eval_venv.close()
        state.env_steps, state.updates = ctx.env_steps, ctx.updates
        state.wall_time_s = wall()
        summary = _summary(config, state, stop_value, stop_reason)
        try:
            write_summary(run_dir, summary)
        finally:
            lock.release()
    summary["run_dir"] = str(run_dir)
    return summary


def _env_setup(config: RunConfig, on_policy: bool) -> dict[str, Any]:
    """The make_vec keyword arguments (manager included) for training and evaluation envs."""
    env = config.env
    manager, workers = env.manager, env.workers
    if manager == "async" and on_policy:
        raise ConfigError(f"{config.algo} needs every env at every step: use env.manager sync or subproc, "
                          "not async")
    if manager == "auto":
        manager, workers = choose_manager(env.id, env.num_envs, env.kwargs, env.workers)
    args: dict[str, Any] = dict(env_kwargs=env.kwargs, max_episode_steps=env.max_episode_steps,
                                manager=manager, max_restarts=env.max_restarts)
    if manager != "sync":
        args.update(workers=workers, step_timeout=env.step_timeout)
    return args


def _next_multiple(steps: int, freq: int) -> int:
    return (steps // freq + 1) * freq if freq else 0


def _summary(config: RunConfig, state: RunState, stop_value: float | None, stop_reason: str) -> dict[str, Any]:
    return {
        "algo": config.algo, "env": config.env.id, "seed": config.seed, "backend": config.resolved_backend,
        "env_steps": state.env_steps, "updates": state.updates, "wall_time_s": round(state.wall_time_s, 4),
        "env_steps_per_s": round(state.env_steps / state.wall_time_s, 2) if state.wall_time_s > 0 else 0.0,
        "best_eval_return": state.best_eval_return, "last_eval_return": state.last_eval_return,
        "stop_value": stop_value, "solved": state.time_to_stop_value_s is not None,
        "time_to_stop_value_s": None if state.time_to_stop_value_s is None else round(state.time_to_stop_value_s, 4),
        "env_steps_to_stop_value": state.env_steps_to_stop_value,
        "stop_reason": stop_reason,
    }


def _restore(run_dir: Path, algo: Any) -> tuple[RunState, dict[str, Any]]:
    ckpt, note = load_newest(run_dir / "checkpoints", prefer="last")
    if note is not None:
        log.warning("%s", note)
    algo.load_state_dict(ckpt.state["algo"])
    torch.set_rng_state(ckpt.state["rng"]["torch"])
    state = RunState(**ckpt.meta["run"])
    state.resumes += 1
    return state, ckpt.meta.get("source", {})


class _OnPolicySource:
    """Rollouts for on-policy algorithms: ``gather`` returns ([T, N] rollout, env steps), from the
    local envs or from ``samples`` after publishing the current weights."""

    def __init__(self, algo: Any, venv: Any, cfg: Any, samples: Any = None,
                 publish: Callable[[dict, int], None] | None = None):
        self.algo, self.samples, self.publish = algo, samples, publish
        if samples is not None:
            self.collector = samples
        elif isinstance(venv, AgentEnv):
            self.collector = AgentRolloutCollector(venv, algo.policy, cfg.num_steps)
        else:
            self.collector = OnPolicyCollector(venv, algo.policy, cfg.num_steps)
        self._published = -1

    def reset(self, seed: int | None) -> None:
        self.collector.reset(seed)

    def steps_received_while_learning(self) -> int:
        return 0

    def gather(self, env_steps: int, updates: int) -> tuple[dict, int]:
        policy = self.algo.policy
        if self.publish is not None and policy.version != self._published:
            self.publish(policy.get_weights(), policy.version)  # (observation statistics included)
            self._published = policy.version
        rollout, steps = self.collector.pull()
        moments = self.collector.pop_observation_moments()  # what rollout workers saw, for obs_norm
        if moments is not None:
            policy.merge_observation_moments(moments)
        return rollout, steps

    def pop_episodes(self) -> tuple[list[float], list[int]]:
        return self.collector.pop_episodes()

    def state(self) -> dict[str, Any]:
        return {}

    def save(self, folder: Path) -> None:
        pass


def _load_previous(previous: Path | str, algo: Any, config: RunConfig) -> None:
    ckpt = load_checkpoint(previous)
    if ckpt.meta.get("algo") != config.algo:
        raise CheckpointError(f"--previous {str(ckpt.path)!r} holds a {ckpt.meta.get('algo')!r} policy, "
                              f"not {config.algo!r}: pass a checkpoint of the same algorithm")
    try:
        algo.policy.set_weights(ckpt.state["algo"])
    except (RuntimeError, ValueError, KeyError) as exc:
        raise CheckpointError(f"--previous {str(ckpt.path)!r} does not fit this env/network "
                              f"({ckpt.meta.get('env')} -> {config.env.id}): {explain_load_error(exc)}") from None
