"""One learner of a data-parallel group (``learners`` > 1; docs/distributed.md "Learners"): ``GroupTrainer``, the
Trainer on its own share of the run, wherever the learner was placed (a local process of the supervisor's,
training/learner_group.py; a Ray actor, training/ray_learners.py; a process torchrun started, ``join_group``).

Its share: its own ``env.num_envs / N`` envs (learner r's env k seeded as env ``r * num_envs / N + k`` of one
learner's run), ``batch_size / N`` rows of each minibatch, the gradients averaged through the group
(relayrl/learners). What steers the loop is agreed every round: the env steps (the sum over the learners: the run's
env_steps), the replay updates due (the least of the learners'), the stops (Ctrl-C, SIGTERM, time limit: any
learner's), the evaluation's verdict (learner 0's). Learner 0 alone writes the run directory and evaluates; every
learner's episodes reach its log.
"""

from __future__ import annotations

import os
import time
from typing import Any

import numpy as np
import torch

from relayrl.algos import get_algo
from relayrl.errors import ConfigError
from relayrl.io.rundir import new_run_dir
from relayrl.learners import Collective, broadcast_state, init_collective, per_learner
from relayrl.options import RunConfig
from relayrl.training.experience import GymExperience
from relayrl.training.rounds import UpdatesDue, Work
from relayrl.training.run_state import RunState, run_summary
from relayrl.training.stops import STOPPED, StopRequest
from relayrl.training.trainer import RESUME_SEED_OFFSET, Trainer

LEARNER_SEED_OFFSET = 7_919  # learner r > 0 draws its actions from torch seed + r * this (learner 0: the run's seed)


class SharedStop(StopRequest):
    """A learner's stop event: set by the supervisor through shared memory (1: Ctrl-C, 2: SIGTERM)."""

    def __init__(self, flag: Any):
        self._reason = "interrupted"
        super().__init__()
        self.flag = flag

    def is_set(self) -> bool:
        return self.flag.value > 0 or super().is_set()

    @property  # type: ignore[override]
    def reason(self) -> str:
        return STOPPED[self.flag.value - 1] if self.flag.value > 0 else self._reason

    @reason.setter
    def reason(self, value: str) -> None:
        self._reason = value


class _NoLock:
    """A learner other than 0 holds no lock on the run directory (learner 0 does, for the group)."""

    def acquire(self) -> _NoLock:
        return self

    def release(self) -> None:
        pass

    def __enter__(self) -> _NoLock:
        return self

    def __exit__(self, *exc: object) -> None:
        pass


class _NoLogger:
    """What a learner other than 0 logs to: nothing (its episodes reach learner 0's log)."""

    def log(self, event: str, env_steps: int, wall_time_s: float, values: dict[str, Any]) -> None:
        pass

    def close(self, summary: dict[str, Any] | None = None, failed: bool = False) -> None:
        pass


class GroupTrainer(Trainer):
    """The Trainer of one learner of a group (the module docstring): learner 0 writes the run; the others write
    nothing; every decision that steers the loop is the same on all of them."""

    def __init__(self, config: RunConfig, experience: Any, learners: Collective, *,
                 heartbeat: Any = None, **options: Any):
        self.learners, self.leader, self.heartbeat = learners, learners.rank == 0, heartbeat
        self.writes_run = self.leader
        if not self.leader:
            options["quiet"] = True
        super().__init__(config, experience, **options)

    # ---- set up: learner 0 restores and writes; the others take its state
    def _lock_run(self) -> Any:
        return super()._lock_run() if self.leader else _NoLock()

    def _restore_run(self) -> tuple[RunState, dict[str, Any]]:
        mine = super()._restore_run() if self.leader else None
        state, source = self.learners.broadcast_object(None if mine is None else (vars(mine[0]), mine[1]))
        return RunState(**state), source

    def _join_learners(self) -> None:
        broadcast_state(self.algo, self.learners)  # learner 0's weights and optimisers (a resume's among them)
        self.algo.bind_learners(self.learners)
        rank = self.learners.rank
        if rank:  # (learner 0 keeps the run's seed, or the generator a resume restored)
            seed = self.config.seed + RESUME_SEED_OFFSET * self.state.resumes + LEARNER_SEED_OFFSET * rank
            torch.manual_seed(seed)
            np.random.seed(seed % 2**32)

    def _open_files(self, tensorboard: bool) -> None:
        if self.leader:
            super()._open_files(tensorboard)
        else:
            self.logger = _NoLogger()  # type: ignore[assignment]

    def env_seed(self) -> int:
        return super().env_seed() + self.learners.rank * self.experience.columns

    # ---- the loop: agreed counts and stops
    def collect(self) -> Work:
        if self.heartbeat is not None:
            self.heartbeat[self.learners.rank] = time.monotonic()
        ctx = self.learner.ctx
        before = ctx.env_steps
        work = super().collect()
        steps = self.group_steps(ctx.env_steps - before)
        ctx.env_steps = before + steps
        self.timing["steps"] = steps
        if isinstance(work, UpdatesDue):  # every learner runs the same number of updates: the least due
            work = UpdatesDue(-self.learners.max_(-work.n))
        return work

    def group_steps(self, steps: int) -> int:
        return int(self.learners.sum_(torch.tensor([steps], dtype=torch.float64)).item())

    def pop_episodes(self) -> tuple[list[float], list[int]]:
        returns, lengths = super().pop_episodes()
        gathered = self.learners.all_gather_object((list(returns), list(lengths)))
        return ([r for part in gathered for r in part[0]],  # type: ignore[index]
                [n for part in gathered for n in part[1]])  # type: ignore[index]

    def evaluate(self) -> bool:
        reached = super().evaluate() if self.leader else False
        reached, state = self.learners.broadcast_object((reached, vars(self.state)) if self.leader else None)
        if not self.leader:
            vars(self.state).update(state)
        return bool(reached)

    def checkpoint(self, name: str) -> None:
        if self.leader:
            super().checkpoint(name)

    def _limit_reached(self) -> str | None:
        reason = super()._limit_reached()
        if reason == "train_iter":  # (the same update count on every learner)
            return reason
        return "time_limit" if self.learners.any_(reason == "time_limit") else None

    def _stop_reason(self) -> str | None:
        reason = super()._stop_reason()
        agreed = self.learners.max_(STOPPED.index(reason) + 1 if reason in STOPPED else 0)
        return STOPPED[agreed - 1] if agreed else None

    # ---- the end: learner 0's summary
    def _finish(self, stop_reason: str) -> dict[str, Any]:
        if self.leader:
            return super()._finish(stop_reason)
        state, ctx = self.state, self.learner.ctx
        try:
            self.display.close()
            self.experience.close()
        finally:
            state.env_steps, state.updates, state.wall_time_s = ctx.env_steps, ctx.updates, self.wall()
        return run_summary(self.config, state, self.stop_value, stop_reason)

    def _report_complete(self) -> dict[str, Any]:
        if self.leader:
            return super()._report_complete()
        return {**run_summary(self.config, self.state, self.stop_value, self.complete_reason),
                "run_dir": str(self.run_dir)}


def learner_config(config: RunConfig, learners: Collective) -> RunConfig:
    """The config a learner's own envs are made from: its share of env.num_envs (evaluation: learner 0's alone)."""
    env = config.env.model_copy(update={"num_envs": per_learner(config.env.num_envs, learners, "env.num_envs")})
    update: dict[str, Any] = {"env": env}
    if learners.rank:
        update["eval"] = config.eval.model_copy(update={"num_envs": 1, "episodes": 1})
    return config.model_copy(update=update)


def group_trainer(config: RunConfig, learners: Collective, **options: Any) -> GroupTrainer:
    """The GroupTrainer of learner ``learners.rank`` on its own share of local Gymnasium envs."""
    on_policy = get_algo(config.algo).on_policy
    return GroupTrainer(config, GymExperience(learner_config(config, learners), on_policy), learners, **options)


def join_group(config: RunConfig, **options: Any) -> dict[str, Any]:
    """This process as one learner of a group started by torchrun (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR,
    MASTER_PORT): its share of the run; learner 0's run directory, hooks and summary."""
    size = int(os.environ["WORLD_SIZE"])
    if size != config.learners:
        raise ConfigError(f"learners={config.learners}, but WORLD_SIZE={size} learners were started (torchrun "
                          f"--nproc-per-node): set --learners {size}")
    learners = init_collective(device=_device(config), timeout_s=config.learner_timeout_s)
    try:
        run_dir = options.pop("run_dir", None) or new_run_dir(config.env.id, config.algo)
        options["run_dir"] = learners.broadcast_object(str(run_dir))  # (each process's clock names its own)
        if learners.rank:
            options["hooks"] = ()
        return group_trainer(config, learners, **options).run()
    finally:
        learners.close()


def _device(config: RunConfig) -> torch.device:
    """A learner's device: cuda:LOCAL_RANK when it learns on CUDA, else the CPU."""
    if config.device != "cpu" and torch.cuda.is_available():
        index = int(os.environ.get("LOCAL_RANK", os.environ.get("RANK", "0")))
        torch.cuda.set_device(index)
        return torch.device("cuda", index)
    return torch.device("cpu")
