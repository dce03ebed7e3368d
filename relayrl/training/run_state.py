"""What a run carries across a resume, and how it ends: ``RunState`` (the counters and results stored in every
checkpoint's meta), the summary written from it, restoring it from the newest checkpoint (making the best
checkpoint and the best score agree again), whether a resumed run has anything left to do, and starting from
another run's weights (``--previous``). The Trainer (training/trainer.py) is the one user."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from relayrl.errors import CheckpointError
from relayrl.io.checkpoint import copy_checkpoint, explain_load_error, load_checkpoint, load_newest, write_json_copy
from relayrl.options import RunConfig

log = logging.getLogger("relayrl")


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
    best_train_return: float | None = None  # the best train/return_mean logged (eval.on_best_train)


def run_summary(config: RunConfig, state: RunState, stop_value: float | None, stop_reason: str) -> dict[str, Any]:
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


def restore_run(run_dir: Path, algo: Any) -> tuple[RunState, dict[str, Any]]:
    ckpt, note = load_newest(run_dir / "checkpoints", prefer="last")
    if note is not None:
        log.warning("%s", note)
    algo.load_state_dict(ckpt.state["algo"])
    torch.set_rng_state(ckpt.state["rng"]["torch"])
    state = RunState(**ckpt.meta["run"])
    state.resumes += 1
    restore_best(ckpt.path, state)
    return state, ckpt.meta.get("source", {})


def restore_best(resumed_from: Path, state: RunState) -> None:
    """Make the best checkpoint and the best score agree again after a kill between the evaluation's
    last and best writes (``evaluate`` writes last, then best).

    If the checkpoint resumed from was written by the evaluation that set the best score, it holds that
    very policy: it becomes the best checkpoint. Otherwise the score is the one the best checkpoint that
    exists records (None without one), so the summary never reports a best that ``relayrl eval`` cannot load.
    """
    best_path = resumed_from.parent / "best.safetensors"
    if resumed_from.name == best_path.name:
        return
    try:
        best = load_checkpoint(best_path) if best_path.is_file() else None
    except CheckpointError:  # damaged: as good as missing
        best = None
    best_score = best.meta.get("run", {}).get("best_eval_return") if best is not None else None
    if best_score == state.best_eval_return:
        if best is not None and not best_path.with_suffix(".json").is_file():
            write_json_copy(best_path)  # killed between best.safetensors and best.json
        return
    if (state.best_eval_return is not None and state.last_eval_return == state.best_eval_return
            and state.last_eval_steps == state.env_steps):
        copy_checkpoint(resumed_from, best_path)
        log.warning("the run stopped before it wrote the best checkpoint of its evaluation at env step %d "
                    "(return %s): restored it from %s, which holds that policy", state.env_steps,
                    state.best_eval_return, resumed_from.name)
        return
    log.warning("the best return %s the run recorded has no best checkpoint to go with it: the run continues "
                "from the best checkpoint it has (%s)", state.best_eval_return,
                "none yet" if best_score is None else f"return {best_score}")
    state.best_eval_return = best_score


def already_complete(state: RunState, config: RunConfig, stop_value: float | None) -> tuple[str, str] | None:
    """Why a resumed run has nothing left to do (None when it has): the stop it reached and how to train it
    further. A run stopped (Ctrl-C) in its last round has its final evaluation left to do."""
    if state.last_eval_steps != state.env_steps:
        return None
    total_steps, train_iter, time_limit = config.total_steps, config.train_iter, config.time_limit_s
    if state.env_steps >= total_steps:
        return "total_steps", (f"its {state.env_steps} env steps reach total_steps {total_steps}; to train it "
                               f"further, resume with a larger --total-steps (e.g. --total-steps {2 * total_steps}; "
                               "total_steps= in Python)")
    if train_iter is not None and state.updates >= train_iter:
        return "train_iter", (f"its {state.updates} updates reach train_iter {train_iter}; to train it further, "
                              f"resume with a larger --train-iter (e.g. --train-iter {2 * train_iter}; train_iter= "
                              "in Python)")
    if time_limit is not None and state.wall_time_s >= time_limit:
        return "time_limit", (f"its {state.wall_time_s:.0f} s of wall time reach time_limit_s {time_limit:g}; to "
                              f"train it further, resume with a larger --time-limit (e.g. --time-limit "
                              f"{2 * time_limit:g}; time_limit_s= in Python)")
    if stop_value is not None and state.last_eval_return is not None and state.last_eval_return >= stop_value:
        return "stop_value", (f"its last evaluation ({state.last_eval_return:g}) reached stop value {stop_value:g}; "
                              "to train it further, resume with a higher --stop-value (stop_value= in Python)")
    return None


def load_previous(previous: Path | str, algo: Any, config: RunConfig) -> None:
    ckpt = load_checkpoint(previous)
    if ckpt.meta.get("algo") != config.algo:
        raise CheckpointError(f"--previous {str(ckpt.path)!r} holds a {ckpt.meta.get('algo')!r} policy, "
                              f"not {config.algo!r}: pass a checkpoint of the same algorithm")
    try:
        algo.policy.set_weights(ckpt.state["algo"])
    except (RuntimeError, ValueError, KeyError) as exc:
        raise CheckpointError(f"--previous {str(ckpt.path)!r} does not fit this env/network "
                              f"({ckpt.meta.get('env')} -> {config.env.id}): {explain_load_error(exc)}") from None
