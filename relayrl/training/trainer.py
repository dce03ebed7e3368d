"""The Trainer: set up, then collect, learn, evaluate, checkpoint and log until a stop.

``run_trainer(config)`` runs the Trainer in this process on local Gymnasium envs (or on a sample source
or an ``Experience`` you give it); ``relayrl.launch.run`` (what ``relayrl train`` and ``relayrl.train``
run) picks the ``Experience`` for the config (local envs, rollout workers, the relay, a simulator
bridge) and hands it here. The run directory is described in DESIGN.md.

    trainer = Trainer(config, GymExperience(config, on_policy=True), run_dir="runs/x")
    summary = trainer.run()

One round of ``run``: ``collect`` (the round's ``Work``: a rollout, or the replay ``UpdatesDue``) ->
``learn`` (the Learner and its hooks; ``log`` and the periodic checkpoint are hooks) -> ``evaluate``
every ``eval.freq`` env steps, and with ``eval.on_best_train`` after a round whose logged training mean
return is a new best (``eval.best_train_gap`` steps after the last evaluation; either writes the last and
best checkpoints) -> stop at the stop value,
``total_steps``, or Ctrl-C or SIGTERM (``stop_event``; a ``StopRequest`` says which, as the summary's
``stop_reason``).
"""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path
from typing import Any, Callable, Generator, Sequence

import numpy as np
import torch

from relayrl.algos import get_algo
from relayrl.config import save_config
from relayrl.core import SampleSource
from relayrl.envs.space_data import space_to_data
from relayrl.errors import CheckpointError, ConfigError, EnvError, NonFiniteError
from relayrl.io.checkpoint import save_checkpoint
from relayrl.io.metrics import MetricsLogger, check_tracking
from relayrl.io.rundir import (RunLock, check_fresh_run_dir, discard_new_run, new_run_dir, read_summary,
                                write_summary)
from relayrl.options import RunConfig
from relayrl.policy.device import resolve_device
from relayrl.training.experience import Experience, GymExperience, SourceExperience
from relayrl.training.learner import HookContext, Learner
from relayrl.training.offline import OfflineRounds
from relayrl.training.offpolicy import ReplayRounds, replay_layout
from relayrl.training.onpolicy import OnPolicyRounds
from relayrl.training.overlap import check_overlap
from relayrl.training.progress import ProgressDisplay
from relayrl.training.rounds import Rounds, UpdatesDue, Work
from relayrl.training.run_state import RunState, already_complete, load_previous, restore_run, run_summary
from relayrl.training.stops import LIMITS, STOPPED, StopRequest
from relayrl.training.threads import default_threads, resolve_threads

log = logging.getLogger("relayrl")

EVAL_SEED_OFFSET = 10_000
RESUME_SEED_OFFSET = 1_000_003

Hooks = Sequence[tuple[str, Callable[[HookContext], None], dict[str, Any]]]


def run_trainer(config: RunConfig, *, experience: Experience | None = None, samples: SampleSource | None = None,
                **options: Any) -> dict[str, Any]:
    """Run the Trainer on ``config`` in this process until the stop value or ``total_steps``; returns the summary.

    Args:
        experience: where experience comes from (default: local Gymnasium envs of ``config.env``).
        samples: shorthand for ``SourceExperience(config, samples)``: experience from a sample source
            of your own (transitions off-policy, [T, N] rollouts on-policy; ``samples.publish`` gets
            the weights), evaluated on local envs.
        options: ``Trainer``'s keyword arguments (run_dir, resume, previous, quiet, tensorboard,
            stop_event, hooks).
    """
    on_policy = get_algo(config.algo).on_policy
    if experience is None:
        experience = (SourceExperience(config, samples, on_policy=on_policy) if samples is not None
                      else GymExperience(config, on_policy))
    return Trainer(config, experience, **options).run()


class Trainer:
    """One run (module docstring). Everything that can fail on bad input fails in ``__init__``,
    before the run directory is written (a new run that fails to open, e.g. W&B refusing to start, takes
    back what it wrote); the Trainer closes ``experience`` when the run ends. A resume of a run that has
    nothing left to do (``complete``) trains nothing and writes nothing (but a missing summary)."""

    writes_run = True  # (a learner of a group other than learner 0 writes nothing: training/learner_group.py)

    def __init__(self, config: RunConfig, experience: Experience, *, run_dir: Path | str | None = None,
                 resume: bool = False, previous: Path | str | None = None, quiet: bool = True,
                 tensorboard: bool = True, stop_event: threading.Event | None = None, hooks: Hooks = ()):
        """
        Args:
            run_dir: where to write the run (default ``runs/<env>_<algo>_<timestamp>``).
            resume: continue the run in ``run_dir`` from its last checkpoint.
            previous: start from this checkpoint's policy weights (and normaliser) only.
            stop_event: when set (e.g. by Ctrl-C), training stops within the current round (the algorithm
                ends a long learning iteration early: ``Algorithm.stop_on``), writing the last checkpoint and
                the summary (stop reason "interrupted", or a ``StopRequest``'s reason).
            hooks: extra learner hooks as ``(position, fn, options)``, e.g.
                ``("after_iter", print_kl, {"freq": 10, "priority": 50})``; ``fn`` gets a HookContext.
        """
        self.experience, self.stop_event = experience, stop_event
        self.lock: RunLock | None = None
        self.logger: MetricsLogger | None = None
        self.complete: str | None = None  # on a resume: why the run has nothing left to do
        self.complete_reason = "total_steps"  # and which of its stops it reached
        self.abort_reason = "error"
        self._train_return: float | None = None  # the round's logged train/return_mean, until judged (on_best_train)
        self._created_dir = False
        self._new_run_written = False  # True once this new run, alone in its folder, may have written there
        try:
            self._set_up(config, run_dir, resume, previous)
            if self.complete is None:
                self._open_run(quiet, tensorboard, hooks)
        except BaseException:
            self.abandon()
            raise
        if self.complete is not None:
            self.lock.release()
            experience.close()

    def abandon(self) -> None:
        """Take back a Trainer that will not run: a new run's files go, the lock and the experience are released
        (``__init__`` does this when it fails; a caller that built several Trainers does it when a later one fails)."""
        try:
            if self.logger is not None:
                self.logger.close(failed=True)
        finally:
            try:
                if self._new_run_written:  # nothing trained: leave no half-made run behind
                    discard_new_run(self.run_dir, remove_dir=self._created_dir)
            finally:
                if self.lock is not None:
                    self.lock.release()
                self.experience.close()

    # ------------------------------------------------------------------ set up

    def _set_up(self, config: RunConfig, run_dir: Path | str | None, resume: bool, previous: Path | str | None) -> None:
        check_tracking(config.logging.wandb)  # a W&B section without the package: refused before anything is written
        entry = get_algo(config.algo)
        experience = self.experience
        self.on_policy, self.resume = entry.on_policy, resume
        cfg = config.algo_config
        if config.overlap:
            check_overlap(config, entry.on_policy, entry.offline)
            if not experience.overlaps:
                raise ConfigError(f"overlap collects on the learner's own Gymnasium envs; {type(experience).__name__} "
                                  "brings its experience otherwise (agent envs, a sample source): drop overlap")
        self.stop_value = config.stop_value if config.stop_value is not None else experience.stop_value()
        if resume and run_dir is None:
            raise CheckpointError("resume needs the run directory to continue")
        self.run_dir = Path(run_dir) if run_dir is not None else new_run_dir(config.env.id, config.algo)
        if not resume:
            check_fresh_run_dir(self.run_dir)  # never mix a new run into another's files
        if config.threads is None:  # by the observations: torch's default for images, 1 for vectors
            config = config.model_copy(update={"threads": default_threads(experience.observation_space)})
        if config.threads > 0:  # (-1 is resolved below, by timing the algorithm once it exists)
            torch.set_num_threads(config.threads)
        torch.manual_seed(config.seed)
        np.random.seed(config.seed)
        if experience.agents:  # (pools and the relay check their own placement where they are made)
            cfg.check_placement(config.algo, "agents")  # e.g. PPO's prenorm and recurrent policies
        cfg.check(config.algo)  # combinations of options that would silently do nothing, e.g. PPO's prenorm
        self.algo = entry.build_algorithm(cfg, experience.observation_space, experience.action_space, experience.columns)
        self.algo.bind_env(config.env.id, experience.mirror_indices)  # what depends on the env, e.g. PPO's mirror spec
        self.algo.stop_on(self.stop_event)  # Ctrl-C ends a long learning iteration early (PPO: between minibatches)
        self.algo.to(resolve_device(config.device, self.algo.devices, config.algo))  # (refused before any file)
        if config.threads == -1:  # before config.yaml is written, so it records the pick
            config = resolve_threads(config, self.algo)
            torch.set_num_threads(config.threads)
        self.config, self.cfg = config, cfg
        try:  # in every checkpoint: the policy can be rebuilt without the env (relayrl.load of a simulator's run)
            self.spaces = {"observation": space_to_data(experience.observation_space),
                           "action": space_to_data(experience.action_space)}
        except EnvError:  # a space plain data cannot describe: the env gives it when the policy is loaded
            self.spaces = None
        self.state, source_state = RunState(), {}
        if resume:  # the lock first: no other process may be training in the run we restore
            self.lock = self._lock_run()
            self.state, source_state = self._restore_run()
            complete = already_complete(self.state, config, self.stop_value)
            if complete is not None:
                self.complete_reason, self.complete = complete
                return
        elif previous is not None:
            load_previous(previous, self.algo, config)
        self._join_learners()  # (one learner: nothing to join)
        if entry.offline:  # updates from a dataset, no collection (its dataset is checked here, before any file)
            publish = None
            self.rounds: Rounds = OfflineRounds(self.algo, cfg, experience.observation_space, experience.action_space,
                                                seed=config.seed, total_steps=config.total_steps)
        else:
            samples = experience.source(self.algo.policy, cfg, self.on_policy)
            publish = None if experience.shares_policy else samples.publish
            self.rounds = (OnPolicyRounds(self.algo, samples, publish) if self.on_policy else
                           ReplayRounds(self.algo, samples, cfg, seed=config.seed, total_steps=config.total_steps,
                                        publish=publish,
                                        layout=replay_layout(experience.observation_space, cfg.replay_layout),
                                        name=config.algo))
        if resume:
            self.rounds.restore(self.run_dir / "checkpoints", source_state)
        self.publish = publish
        self.evaluator = experience.evaluator(config.eval.episodes, seed=config.seed + EVAL_SEED_OFFSET)
        self.evaluator.count = self.state.eval_count

    def _open_run(self, quiet: bool, tensorboard: bool, hooks: Hooks) -> None:
        config, state = self.config, self.state
        self._open_files(tensorboard)
        self.learner = Learner(self.rounds.learning, HookContext(env_steps=state.env_steps, updates=state.updates,
                                                                 iteration=state.iteration))
        behaviour = config.env.kwargs.get("behaviour") if config.env.id.startswith("bridge:") else None
        label = f"{config.algo} {config.env.id}" + (f" [{behaviour}]" if behaviour else "")
        self.display = ProgressDisplay(config.total_steps, label, quiet,
                                       start=state.env_steps, stop_value=self.stop_value)
        self.timing = {"collect_s": 0.0, "learn_s": 0.0, "steps": 0}
        self._last_periodic = state.updates
        self._start, self._wall_offset = time.perf_counter(), state.wall_time_s
        self.learner.register_hook("after_iter", self.log, priority=10)
        self.learner.register_hook("after_iter", self.periodic_checkpoint, priority=20)
        for position, fn, options in hooks:
            self.learner.register_hook(position, fn, **options)

    def _open_files(self, tensorboard: bool) -> None:
        """The run directory's lock, config and metrics logger (the files of a run that trains)."""
        config = self.config
        if self.lock is None:
            self._created_dir = not self.run_dir.exists()
            self.lock = self._lock_run()  # (creates the run directory)
            check_fresh_run_dir(self.run_dir)  # again, under the lock: two runs started at once in one folder
            self._new_run_written = True
        (self.run_dir / "checkpoints").mkdir(parents=True, exist_ok=True)
        save_config(config, self.run_dir / "config.yaml")
        self.logger = MetricsLogger(self.run_dir, tensorboard=tensorboard, wandb=config.logging.wandb,
                                    run_config=config.model_dump(), resume=self.resume)

    # ---- what a learner of a group does otherwise (training/learner_group.py's GroupTrainer)
    def _lock_run(self) -> RunLock:
        return RunLock(self.run_dir).acquire()

    def _restore_run(self) -> tuple[RunState, dict[str, Any]]:
        return restore_run(self.run_dir, self.algo)

    def _join_learners(self) -> None:
        """After the algorithm is built, moved and restored, before its rounds: a single learner joins no group."""

    def env_seed(self) -> int:
        """The seed of the training envs' reset (env k gets it + k); a resume draws new episodes."""
        return self.config.seed + RESUME_SEED_OFFSET * self.state.resumes

    def group_steps(self, steps: int) -> int:
        """The env steps this process took, as the run counts them (a group of learners: every learner's)."""
        return steps

    def pop_episodes(self) -> tuple[list[float], list[int]]:
        """The training episodes finished since the last call (returns, lengths)."""
        return self.rounds.pop_episodes()

    # ------------------------------------------------------------------ the loop

    def run(self) -> dict[str, Any]:
        """Train until a stop; the summary."""
        rounds = self.stepwise()
        try:
            while True:
                next(rounds)
        except StopIteration as done:
            return done.value

    def stepwise(self) -> Generator[None, None, dict[str, Any]]:
        """``run`` as a generator that pauses before each round's collection (several Trainers that share one
        env take turns: relayrl/training/behaviours.py); it returns the summary. Closed at a pause
        (``close()``), the run ends with the stop reason given to ``abort`` ("error" by default)."""
        if self.complete is not None:
            return self._report_complete()
        config, state, ctx = self.config, self.state, self.learner.ctx
        stop_reason = "total_steps"
        work: Work | None = None
        try:
            self.rounds.reset(seed=self.env_seed())
            if self.publish is not None and not self.on_policy:  # remote collectors start from the learner's weights
                self.publish(self.algo.policy.get_weights(), self.algo.policy.version)
            self.learner.call_hooks("before_run")
            warmup = self.cfg.prenorm_steps()  # (PPO's prenorm)
            if warmup and not self.resume and self.algo.policy.obs_rms is not None:
                ctx.env_steps += self.group_steps(self.rounds.warmup(warmup, config.env.num_envs))
            next_eval = _next_multiple(ctx.env_steps, config.eval.freq)
            while ctx.env_steps < config.total_steps:
                reason = self._limit_reached() or self._stop_reason()
                if reason is not None:
                    stop_reason = reason
                    break
                yield
                if self._stop_reason() is not None:
                    stop_reason = self._stop_reason()
                    break
                work = self.collect()
                self.learn(work)
                if self._stop_reason() is not None:  # no evaluation on the way out
                    stop_reason = self._stop_reason()
                    break
                due = bool(config.eval.freq) and ctx.env_steps >= next_eval
                if due:
                    next_eval = _next_multiple(ctx.env_steps, config.eval.freq)
                if self._new_best_train() or due:  # (judged every round: the best is kept even when due)
                    if self.evaluate():
                        stop_reason = "stop_value"
                        break
                elapsed = self.timing["collect_s"] + self.timing["learn_s"]
                self.display.update(ctx.env_steps, self.timing["steps"] / elapsed if elapsed else 0.0,
                                    state.last_eval_return)
            else:  # (the loop's own end: total_steps reached, unless a limit was reached on the same round)
                stop_reason = self._limit_reached() or stop_reason
            if stop_reason in LIMITS and state.last_eval_steps != ctx.env_steps and self.evaluate():
                stop_reason = "stop_value"
            if stop_reason in STOPPED:
                self.checkpoint("last")
            ctx.stop_reason = stop_reason
            self.learner.call_hooks("after_run")
        except KeyboardInterrupt:
            stop_reason = "interrupted"  # a second Ctrl-C: stop now, keep the checkpoints already written
            raise
        except GeneratorExit:  # closed at a pause: another Trainer of the same env failed or was interrupted
            stop_reason = self.abort_reason
            raise
        except NonFiniteError:
            stop_reason = "nonfinite"
            match work:
                case None | UpdatesDue():  # (no batch of its own: the replay's minibatches are sampled inside)
                    pass
                case batch if self.writes_run:
                    np.savez(self.run_dir / "nonfinite_batch.npz", **batch)
            raise
        except Exception:
            stop_reason = "error"  # e.g. an env that keeps failing; the checkpoints written so far stay
            raise
        finally:
            summary = self._finish(stop_reason)
        summary["run_dir"] = str(self.run_dir)
        return summary

    def abort(self, reason: str) -> None:
        """The stop reason of a ``stepwise`` run closed at a pause ("error", "interrupted")."""
        self.abort_reason = reason

    def collect(self) -> Work:
        """The next round's work (a rollout, or the replay ``UpdatesDue``); counts its env steps."""
        ctx = self.learner.ctx
        t0 = time.perf_counter()
        work, steps = self.rounds.gather(ctx.env_steps, ctx.updates)
        if isinstance(work, UpdatesDue) and self.config.train_iter is not None:  # replay updates stop at train_iter
            work = UpdatesDue(max(0, min(work.n, self.config.train_iter - ctx.updates)))  # (a rollout's epochs run whole)
        ctx.env_steps += steps
        self.timing.update(collect_s=time.perf_counter() - t0 + self.rounds.collect_time_elsewhere(), steps=steps)
        return work

    def learn(self, work: Work) -> None:
        """One Learner iteration on ``work`` (its hooks log and checkpoint)."""
        ctx = self.learner.ctx
        t0 = time.perf_counter()
        self.learner.learn(work, progress=ctx.env_steps / self.config.total_steps)
        late = self.rounds.steps_received_while_learning()  # a polling source's mid-round samples
        ctx.env_steps += late
        self.timing["learn_s"] = time.perf_counter() - t0
        self.timing["steps"] += late

    def _new_best_train(self) -> bool:
        """eval.on_best_train: the round just logged a training mean return above every earlier one, at
        least eval.best_train_gap env steps after the last evaluation (the best is kept either way)."""
        returned, self._train_return = self._train_return, None
        state, config = self.state, self.config.eval
        if not config.on_best_train or returned is None:
            return False
        if state.best_train_return is not None and returned <= state.best_train_return:
            return False
        state.best_train_return = returned
        return state.last_eval_steps < 0 or self.learner.ctx.env_steps - state.last_eval_steps >= config.best_train_gap

    def evaluate(self) -> bool:
        """Evaluate, write the last (and best) checkpoint; True once the stop value is reached."""
        state, ctx = self.state, self.learner.ctx
        result = self.evaluator.evaluate(self.algo.policy)
        if result is None:  # nothing to judge by yet (no test episodes reported)
            return False
        state.last_eval_return, state.last_eval_steps = result.mean, ctx.env_steps
        values = {"eval/return_mean": result.mean, "eval/return_std": result.std, "eval/episodes": len(result.returns)}
        if len(result.lengths):
            values["eval/length_mean"] = float(result.lengths.mean())
        self.logger.log("eval", ctx.env_steps, self.wall(), values)
        improved = state.best_eval_return is None or result.mean > state.best_eval_return
        if improved:
            state.best_eval_return = result.mean
        reached = self.stop_value is not None and result.mean >= self.stop_value
        if reached and state.time_to_stop_value_s is None:
            state.time_to_stop_value_s, state.env_steps_to_stop_value = self.wall(), ctx.env_steps
        self.checkpoint("last")  # before best: a run is resumable from its first checkpoint on, whenever it dies
        if improved:
            self.checkpoint("best")
        return reached

    def checkpoint(self, name: str) -> None:
        state, ctx, config = self.state, self.learner.ctx, self.config
        state.env_steps, state.updates, state.iteration = ctx.env_steps, ctx.updates, ctx.iteration
        state.wall_time_s, state.eval_count = self.wall(), self.evaluator.count
        meta = {"algo": config.algo, "env": config.env.id, "config": config.model_dump(), "run": vars(state),
                "source": self.rounds.state(), "spaces": self.spaces}
        folder = self.run_dir / "checkpoints"
        if name == "last":  # what a resume needs besides the learner (the replay buffer, if any) goes first,
            self.rounds.save(folder)  # so a last checkpoint never lacks it
        save_checkpoint(folder / name, {"algo": self.algo.state_dict(), "rng": {"torch": torch.get_rng_state()}}, meta)

    def log(self, ctx: HookContext) -> None:
        """After every iteration: learner metrics, episodes, env and source counters, the simulator's stats, timing."""
        returns, lengths = self.pop_episodes()
        timing = self.timing
        elapsed = timing["collect_s"] + timing["learn_s"]
        values: dict[str, Any] = {f"train/{k}": v for k, v in ctx.metrics.items()}
        values.update({k if "/" in k else f"env/{k}": v for k, v in self.experience.stats().items()})  # (a named group
        # of its own, e.g. selfplay/elo, keeps its name)
        values.update({f"sim/{k}": v for k, v in self.experience.simulator_stats().items()})
        values.update(self.rounds.stats())
        values.update({"updates": ctx.updates, "iteration": ctx.iteration,
                       "time/collect_s": timing["collect_s"], "time/learn_s": timing["learn_s"],
                       "time/steps_per_s": timing["steps"] / elapsed if elapsed else 0.0,
                       "time/updates_per_s": ctx.metrics.get("updates", 1) / timing["learn_s"] if timing["learn_s"] else 0.0})
        if returns:
            self._train_return = float(np.mean(returns))  # (eval.on_best_train)
            values.update({"train/return_mean": float(np.mean(returns)),
                           "train/length_mean": float(np.mean(lengths)), "train/episodes": len(returns)})
        self.logger.log("train", ctx.env_steps, self.wall(), values)

    def periodic_checkpoint(self, ctx: HookContext) -> None:
        every = self.config.save_freq
        if every > 0 and ctx.updates // every > self._last_periodic // every:
            self.checkpoint(f"update_{ctx.updates:09d}")
            self._last_periodic = ctx.updates

    def wall(self) -> float:
        return self._wall_offset + time.perf_counter() - self._start

    def _report_complete(self) -> dict[str, Any]:
        """A resume with nothing to do: say so and how to go on; the run's summary, written only if the
        run died before writing it."""
        log.warning("run %s is already complete, nothing to train: %s", self.run_dir, self.complete)
        state = self.state
        try:
            summary = read_summary(self.run_dir)
        except (OSError, ValueError):
            summary = None
        if summary is None or summary.get("env_steps") != state.env_steps:
            reached = state.time_to_stop_value_s is not None and state.last_eval_steps == state.env_steps
            summary = run_summary(self.config, state, self.stop_value,
                               "stop_value" if reached else self.complete_reason)
            with self.lock:  # (released when set-up found nothing to do)
                write_summary(self.run_dir, summary)
        summary["run_dir"] = str(self.run_dir)
        return summary

    def _limit_reached(self) -> str | None:
        """The run's own stop other than total_steps that is reached ("train_iter", "time_limit"), or None."""
        config, ctx = self.config, self.learner.ctx
        if config.train_iter is not None and ctx.updates >= config.train_iter:
            return "train_iter"
        if config.time_limit_s is not None and self.wall() >= config.time_limit_s:
            return "time_limit"
        return None

    def _stop_reason(self) -> str | None:
        """Why the run was asked to stop from outside ("interrupted", "terminated"), or None."""
        if self.stop_event is None or not self.stop_event.is_set():
            return None
        return self.stop_event.reason if isinstance(self.stop_event, StopRequest) else "interrupted"

    def _finish(self, stop_reason: str) -> dict[str, Any]:
        state, ctx = self.state, self.learner.ctx
        try:
            self.display.close(ctx.env_steps, state.last_eval_return, solved=stop_reason == "stop_value")
            self.experience.close()
        finally:
            state.env_steps, state.updates = ctx.env_steps, ctx.updates
            state.wall_time_s = self.wall()
            summary = run_summary(self.config, state, self.stop_value, stop_reason)
            try:
                write_summary(self.run_dir, summary)
            finally:
                try:  # the summary goes to W&B too; a run that ended in an error is marked failed there
                    self.logger.close({**summary, "run_dir": str(self.run_dir)},
                                      failed=stop_reason in ("error", "nonfinite"))
                finally:
                    self.lock.release()
        return summary


def _next_multiple(steps: int, freq: int) -> int:
    return (steps // freq + 1) * freq if freq else 0
