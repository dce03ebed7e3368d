"""A run killed at any instant can be resumed from the moment its first checkpoint exists, and the temp
files a kill leaves behind are cleaned up by the resume (and by eval), each named.

Every change to a run directory is an atomic rename; each child process trains and SIGKILLs itself just
before the k-th rename, for every k of a short run, and the test resumes what it left. The best checkpoint
and the best score stay together at every instant: a resume never reports a best return without the
checkpoint that scored it.
"""

import json
import logging
import multiprocessing
import os
import signal

import pytest

from relayrl.config import build_config
from relayrl.errors import CheckpointError
from relayrl.io.checkpoint import load_checkpoint
from relayrl.testing.faults import train_until_write
from relayrl.training.trainer import run_trainer

SETS = {
    "dqn": ["dqn.start_training=64", "dqn.batch_size=16", "dqn.steps_per_iteration=32", "dqn.buffer_size=2000"],
    "ppo": ["ppo.num_steps=16", "ppo.batch_size=32", "ppo.epochs=1"],
}
TOTAL = 384


def config_for(algo, total=TOTAL):
    sets = ["env.num_envs=2", "env.manager=sync", "eval.episodes=1", "eval.num_envs=1", "eval.freq=128",
            f"total_steps={total}", *SETS[algo]]
    return build_config(algo, {"env": {"id": "CartPole-v1"}}, sets)


def renames_of_a_whole_run(algo, tmp_path, monkeypatch):
    targets = []
    real = os.replace

    def counting(src, dst):
        targets.append(os.path.basename(dst))
        real(src, dst)

    monkeypatch.setattr(os, "replace", counting)
    run_trainer(config_for(algo), run_dir=tmp_path / "whole", quiet=True, tensorboard=False)
    monkeypatch.setattr(os, "replace", real)
    return targets


def temp_files(run_dir):
    return sorted(p.name for p in run_dir.rglob(".*.tmp"))


@pytest.mark.parametrize("algo", ["dqn", "ppo"])
def test_a_run_killed_at_any_write_resumes_from_its_newest_checkpoint(algo, tmp_path, monkeypatch, caplog):
    targets = renames_of_a_whole_run(algo, tmp_path, monkeypatch)
    assert targets[0] == "config.yaml" and targets[-1] == "summary.json"
    first_ckpt = targets.index("last.safetensors")  # the order of writes is what this test is about
    assert first_ckpt < targets.index("best.safetensors")
    if algo == "dqn":
        assert targets.index("replay.safetensors") < first_ckpt

    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(["relayrl.runtime.backends._forkserver"])  # (what mp workers use: fast starts)
    tree = config_for(algo).model_dump()
    # every instant of the first checkpoint round, the second round's (later rounds repeat it; a .json
    # copy is never read back, so dying before its rename is dying after the file before it), the summary's
    first_round_end = targets.index("best.json") + 1
    second_round_end = [i for i, name in enumerate(targets) if name == "last.json"][1] + 2
    ks = [*range(1, first_round_end + 1),
          *(k for k in range(first_round_end + 1, second_round_end + 1) if not targets[k - 1].endswith(".json")),
          len(targets)]
    children = []
    for k in ks:
        run_dir = tmp_path / f"killed_at_{k}"
        child = ctx.Process(target=train_until_write, args=(tree, str(run_dir), k))
        child.start()
        children.append((k, run_dir, child))
        if len(children) % 2 == 0:  # two at a time on two cores
            for _, _, c in children[-2:]:
                c.join(120)
    for k, run_dir, child in children:
        child.join(120)
        assert child.exitcode == -signal.SIGKILL, f"the child dying at write {k} ended with {child.exitcode}"

    caplog.set_level(logging.INFO, logger="relayrl")
    for k, run_dir, _ in children:
        killed_before = targets[k - 1]  # the file whose rename never happened
        leftovers = temp_files(run_dir)
        assert any(name.startswith(f".{killed_before}.") for name in leftovers), (k, leftovers)
        caplog.clear()
        if k - 1 <= first_ckpt:  # killed before the first checkpoint was in place: nothing to resume
            with pytest.raises(CheckpointError, match="stopped before its first checkpoint; start it again"):
                run_trainer(config_for(algo, 2 * TOTAL), run_dir=run_dir, resume=True, quiet=True, tensorboard=False)
        else:
            saved = load_checkpoint(run_dir / "checkpoints" / "last.safetensors").meta["run"]["env_steps"]
            summary = run_trainer(config_for(algo, 2 * TOTAL), run_dir=run_dir, resume=True, quiet=True,
                                  tensorboard=False)
            assert summary["stop_reason"] == "total_steps" and summary["env_steps"] >= 2 * TOTAL, (k, summary)
            assert summary["env_steps"] - saved >= TOTAL  # it continued from the checkpoint, not from 0
        assert temp_files(run_dir) == [], k  # the resume removed what the kill left, and said so
        assert f".{killed_before}." in caplog.text and "killed while writing" in caplog.text


def test_resume_takes_the_newest_readable_checkpoint_when_last_is_gone(tmp_path, caplog):
    run_dir = tmp_path / "run"
    run_trainer(config_for("ppo"), run_dir=run_dir, quiet=True, tensorboard=False)
    best = load_checkpoint(run_dir / "checkpoints" / "best.safetensors").meta["run"]["env_steps"]
    (run_dir / "checkpoints" / "last.safetensors").write_bytes(b"not a checkpoint")
    caplog.set_level(logging.INFO, logger="relayrl")
    summary = run_trainer(config_for("ppo", TOTAL + 128), run_dir=run_dir, resume=True, quiet=True, tensorboard=False)
    assert "last.safetensors is unreadable" in caplog.text
    assert f"resuming from best.safetensors (env step {best})" in caplog.text
    assert summary["env_steps"] >= TOTAL + 128 and summary["stop_reason"] == "total_steps"


def test_a_run_directory_in_use_is_not_resumed_twice(tmp_path):
    from relayrl.io.rundir import RunLock

    run_dir = tmp_path / "run"
    run_trainer(config_for("ppo"), run_dir=run_dir, quiet=True, tensorboard=False)
    with RunLock(run_dir):  # another process training there now
        with pytest.raises(CheckpointError, match=r"is in use by another relayrl process \(pid \d+\)"):
            run_trainer(config_for("ppo", 2 * TOTAL), run_dir=run_dir, resume=True, quiet=True, tensorboard=False)


FAULTY = "relayrl.testing.envs:relayrl-test/Faulty-v0"  # every episode returns 10: no evaluation beats the first


def constant_return_config(total):
    sets = ["env.num_envs=2", "env.manager=sync", "eval.episodes=1", "eval.num_envs=1", "eval.freq=128",
            f"total_steps={total}", *SETS["dqn"]]
    return build_config("dqn", {"env": {"id": FAULTY}}, sets)


def test_a_kill_at_any_write_of_the_first_evaluation_keeps_the_best_checkpoint_and_its_score_together(
        tmp_path, monkeypatch, caplog):
    from relayrl.io.checkpoint import resolve_checkpoint

    targets = []
    real = os.replace
    monkeypatch.setattr(os, "replace", lambda src, dst: (targets.append(os.path.basename(dst)), real(src, dst)))
    run_trainer(constant_return_config(128), run_dir=tmp_path / "whole", quiet=True, tensorboard=False)
    monkeypatch.setattr(os, "replace", real)
    first_write = min(targets.index(name) for name in ("replay.safetensors", "last.safetensors"))
    best_done = targets.index("best.json")
    assert first_write < targets.index("last.safetensors") < targets.index("best.safetensors") < best_done

    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(["relayrl.runtime.backends._forkserver"])
    tree = constant_return_config(128).model_dump()
    children = []
    for k in range(first_write + 1, best_done + 3):  # dying before each write of the first evaluation, and after
        child = ctx.Process(target=train_until_write, args=(tree, str(tmp_path / f"killed_at_{k}"), k))
        child.start()
        children.append((k, tmp_path / f"killed_at_{k}", child))
    for k, _, child in children:
        child.join(120)
        assert child.exitcode == -signal.SIGKILL, f"the child dying at write {k} ended with {child.exitcode}"

    caplog.set_level(logging.INFO, logger="relayrl")
    for k, run_dir, _ in children:
        best = run_dir / "checkpoints" / "best.safetensors"
        if not (run_dir / "checkpoints" / "last.safetensors").is_file():
            with pytest.raises(CheckpointError, match="stopped before its first checkpoint"):
                run_trainer(constant_return_config(384), run_dir=run_dir, resume=True, quiet=True, tensorboard=False)
            assert not best.exists()
            continue
        summary = run_trainer(constant_return_config(384), run_dir=run_dir, resume=True, quiet=True, tensorboard=False)
        assert summary["env_steps"] >= 384 and summary["best_eval_return"] == 10.0, (k, summary)
        # the score the summary reports comes with its checkpoint, which eval and relayrl.load pick
        assert best.is_file(), (k, targets[k - 1])
        assert load_checkpoint(best).meta["run"]["best_eval_return"] == summary["best_eval_return"]
        assert json.loads(best.with_suffix(".json").read_text())["run"]["best_eval_return"] == 10.0
        assert resolve_checkpoint(run_dir) == best
