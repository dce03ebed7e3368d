"""eval.on_best_train: an evaluation whenever the logged training mean return is a new best of the run
(at least eval.best_train_gap env steps after the last evaluation), counted like any other. A tiny
CartPole PPO run; the expected evaluation points are worked out from its own metrics.jsonl."""

from __future__ import annotations

import json

import pytest

from relayrl.errors import ConfigError
from relayrl.io.checkpoint import load_checkpoint
from relayrl.training.trainer import run_trainer

GAP = 64


def records(run_dir) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def expected_evaluations(train: list[dict], total_steps: int, gap: int) -> list[int]:
    """The schedule, from the logged training returns: a new best at least ``gap`` steps after the
    last evaluation, and the final one at the end of training (eval.freq=0)."""
    best, last, out = None, None, []
    for record in train:
        ret = record.get("train/return_mean")
        if ret is None or (best is not None and ret <= best):
            continue
        best = ret
        if last is None or record["env_steps"] - last >= gap:
            out.append(record["env_steps"])
            last = record["env_steps"]
    if not out or out[-1] != total_steps:
        out.append(total_steps)
    return out


def test_evaluations_happen_at_new_best_training_returns_and_not_otherwise(tiny_config, tmp_path):
    config = tiny_config("eval.freq=0", "eval.on_best_train=true", f"eval.best_train_gap={GAP}", "seed=3",
                         total_steps=640)
    summary = run_trainer(config, run_dir=tmp_path / "r", tensorboard=False)
    logged = records(tmp_path / "r")
    train = [r for r in logged if r["event"] == "train"]
    evals = [r["env_steps"] for r in logged if r["event"] == "eval"]
    assert evals == expected_evaluations(train, 640, GAP)
    assert len(evals) >= 3  # new bests during training, besides the final evaluation
    # a new best inside the gap evaluates nothing: the run had some (else the gap is untested)
    bests = [r["env_steps"] for i, r in enumerate(train) if "train/return_mean" in r and all(
        r["train/return_mean"] > p.get("train/return_mean", float("-inf")) for p in train[:i])]
    assert set(bests) - set(evals), "no new best fell inside the gap: pick another seed"
    # they count like any other: the best checkpoint is the best of them
    eval_returns = [r["eval/return_mean"] for r in logged if r["event"] == "eval"]
    assert summary["best_eval_return"] == max(eval_returns)
    best = load_checkpoint(tmp_path / "r" / "checkpoints" / "best.safetensors")
    assert best.meta["run"]["best_eval_return"] == max(eval_returns)


def test_without_the_option_only_the_regular_schedule_runs(tiny_config, tmp_path):
    summary = run_trainer(tiny_config("eval.freq=0", "seed=3", total_steps=320), run_dir=tmp_path / "r",
                          tensorboard=False)
    assert [r["env_steps"] for r in records(tmp_path / "r") if r["event"] == "eval"] == [summary["env_steps"]]


def test_a_negative_gap_is_a_config_error(tiny_config):
    with pytest.raises(ConfigError, match="'eval.best_train_gap' = -1: .*greater than or equal to 0"):
        tiny_config("eval.on_best_train=true", "eval.best_train_gap=-1")


def test_an_evaluation_on_a_new_best_can_reach_the_stop_value(tiny_config, tmp_path):
    config = tiny_config("eval.freq=0", "eval.on_best_train=true", f"eval.best_train_gap={GAP}", "seed=3",
                         total_steps=640, stop_value=1.0)  # any CartPole evaluation reaches 1
    summary = run_trainer(config, run_dir=tmp_path / "r", tensorboard=False)
    evals = [r["env_steps"] for r in records(tmp_path / "r") if r["event"] == "eval"]
    assert summary["stop_reason"] == "stop_value" and summary["env_steps"] < 640
    assert evals == [summary["env_steps"]] == [summary["env_steps_to_stop_value"]]
