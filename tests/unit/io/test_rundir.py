"""relayrl.io.rundir: run directory names, summary.json, a new run's folder (never another run's) and file modes."""

from __future__ import annotations

import json
import os
import re
import stat
from pathlib import Path

import pytest

from relayrl.errors import CheckpointError
from relayrl.io import rundir
from relayrl.io.rundir import SUMMARY_KEYS, new_run_dir, read_summary, write_experiment_record, write_summary


def full_summary() -> dict:
    return {
        "algo": "ppo", "env": "CartPole-v1", "seed": 0, "backend": "inline", "env_steps": 4096,
        "updates": 40, "wall_time_s": 12.5, "env_steps_per_s": 327.7, "best_eval_return": 500.0,
        "last_eval_return": 480.0, "stop_value": 475.0, "solved": True, "time_to_stop_value_s": 10.0,
        "env_steps_to_stop_value": 3072,
    }


def test_summary_keys_match_design():
    assert SUMMARY_KEYS == (
        "algo", "env", "seed", "backend", "env_steps", "updates", "wall_time_s", "env_steps_per_s",
        "best_eval_return", "last_eval_return", "stop_value", "solved",
        "time_to_stop_value_s", "env_steps_to_stop_value",
    )


def test_write_and_read_summary(tmp_path):
    summary = full_summary() | {"time_to_stop_value_s": None, "extra": "kept"}
    write_summary(tmp_path, summary)
    assert read_summary(tmp_path) == summary
    assert json.loads((tmp_path / "summary.json").read_text()) == summary
    assert [p.name for p in tmp_path.iterdir()] == ["summary.json"]  # no temp file left


@pytest.mark.parametrize("key", SUMMARY_KEYS)
def test_write_summary_refuses_missing_key(tmp_path, key):
    summary = full_summary()
    del summary[key]
    with pytest.raises(ValueError, match=key):
        write_summary(tmp_path, summary)
    assert not (tmp_path / "summary.json").exists()


def test_write_summary_missing_key_keeps_previous_summary(tmp_path):
    write_summary(tmp_path, full_summary())
    before = (tmp_path / "summary.json").read_bytes()
    with pytest.raises(ValueError):
        write_summary(tmp_path, {"algo": "ppo"})
    assert (tmp_path / "summary.json").read_bytes() == before


def test_new_run_dir_name(tmp_path, monkeypatch):
    monkeypatch.setattr(rundir.time, "strftime", lambda fmt: "20250101-120000")
    path = new_run_dir("ALE/Pong-v5", "ppo", root=tmp_path)
    assert path == tmp_path / "ALE-Pong-v5_ppo_20250101-120000"
    assert not path.exists()  # naming only; the caller creates it


def test_new_run_dir_distinct_within_one_second(tmp_path, monkeypatch):
    monkeypatch.setattr(rundir.time, "strftime", lambda fmt: "20250101-120000")
    paths = []
    for _ in range(4):
        path = new_run_dir("CartPole-v1", "ppo", root=tmp_path)
        assert path not in paths
        path.mkdir()
        paths.append(path)
    assert len(set(paths)) == 4
    assert all(p.parent == tmp_path and p.name.startswith("CartPole-v1_ppo_20250101-120000") for p in paths)


def test_new_run_dir_real_clock_two_calls(tmp_path):
    first = new_run_dir("CartPole-v1", "ppo", root=tmp_path)
    first.mkdir()
    second = new_run_dir("CartPole-v1", "ppo", root=tmp_path)
    assert second != first and not second.exists()


def test_the_experiment_record_appends_each_start_and_resume(tmp_path):
    from relayrl.io.rundir import write_experiment_record

    write_experiment_record(tmp_path, ["relayrl", "train", "ppo", "--set", "ppo.epochs=4"], ["ppo.epochs: 5 -> 4"])
    write_experiment_record(tmp_path, ["relayrl", "train", "ppo", "--resume", "run dir"], [], resumed=True)
    text = (tmp_path / "experiment.txt").read_text()
    assert text.startswith("started ") and "relayrl 0.1.0" in text and "torch " in text
    assert "command: relayrl train ppo --set ppo.epochs=4" in text and "  ppo.epochs: 5 -> 4" in text
    assert "\nresumed " in text and "command: relayrl train ppo --resume 'run dir'" in text
    assert "options changed on resume: none" in text


@pytest.mark.parametrize("env_id, algo, expected", [
    ("pettingzoo:pettingzoo.mpe:simple_spread_v3", "ppo", "pettingzoo-pettingzoo.mpe-simple_spread_v3_ppo_"),
    ("bridge:python -m relayrl.bridge.examples.ball3d --agents 4", "sac",
     "bridge-python-m-relayrl.bridge.examples.ball3d-agents-4_sac_"),
    ("examples.my_env:make_env", "examples.reinforce:reinforce",
     "examples.my_env-make_env_examples.reinforce-reinforce_"),
    ("../..", "ppo", "run_ppo_"),  # never a hidden folder or one that climbs out of runs/
])
def test_run_directory_names_keep_to_letters_digits_dots_dashes_underscores(tmp_path, env_id, algo, expected):
    path = new_run_dir(env_id, algo, root=tmp_path)
    assert path.parent == tmp_path and path.name.startswith(expected), path.name
    assert re.fullmatch(r"[A-Za-z0-9._-]+", path.name)


def test_a_bridge_command_of_any_length_gives_a_short_name(tmp_path):
    name = new_run_dir("bridge:" + "x" * 500, "ppo", root=tmp_path).name
    assert len(name) < 100 and name.startswith("bridge-xxx")


def tiny(**overrides):
    from relayrl.config import build_config

    sets = ["env.num_envs=2", "ppo.num_steps=16", "ppo.batch_size=16", "ppo.epochs=1", "eval.freq=32",
            "eval.episodes=1", "eval.num_envs=1"]
    return build_config("ppo", {"env": {"id": "CartPole-v1"}}, sets, {"total_steps": 64, **overrides})


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_a_new_run_refuses_a_folder_that_holds_another_run_and_leaves_it_as_it_was(tmp_path):
    import relayrl

    first = relayrl.train("ppo", "CartPole-v1", tiny(), run_dir=tmp_path / "run", quiet=True)
    before = snapshot(first.run_dir)
    assert "metrics.jsonl" in before and "summary.json" in before
    with pytest.raises(CheckpointError) as refused:
        relayrl.train("ppo", "CartPole-v1", tiny(seed=1), run_dir=tmp_path / "run", quiet=True)
    message = str(refused.value)
    assert "is not empty" in message and f"--resume {tmp_path / 'run'}" in message and "resume=True" in message
    assert "fresh directory" in message
    assert snapshot(first.run_dir) == before  # not a byte written, appended or removed


def test_the_trainer_itself_refuses_a_used_folder_before_writing(tmp_path):
    from relayrl.training.trainer import run_trainer

    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "notes.txt").write_text("mine\n")
    with pytest.raises(CheckpointError, match=r"is not empty \(notes\.txt\)"):
        run_trainer(tiny(), run_dir=tmp_path / "run", tensorboard=False)
    assert snapshot(tmp_path / "run") == {"notes.txt": b"mine\n"}


def test_an_empty_existing_folder_is_a_fine_run_directory(tmp_path):
    import relayrl

    (tmp_path / "empty").mkdir()
    run = relayrl.train("ppo", "CartPole-v1", tiny(), run_dir=tmp_path / "empty", tensorboard=False)
    assert run.summary["env_steps"] == 64 and (tmp_path / "empty" / "summary.json").is_file()


@pytest.mark.parametrize("umask", [0o022, 0o077, 0o002])
def test_every_file_of_a_run_follows_the_umask(tmp_path, umask):
    from relayrl.training.trainer import run_trainer

    old = os.umask(umask)
    try:
        run_trainer(tiny(), run_dir=tmp_path / "run", hooks=[("before_run", lambda ctx: write_experiment_record(
            tmp_path / "run", ["relayrl", "train", "ppo"], []), {})])
    finally:
        os.umask(old)
    files = {p.relative_to(tmp_path / "run").as_posix(): stat.S_IMODE(p.stat().st_mode)
             for p in (tmp_path / "run").rglob("*") if p.is_file() and p.name != ".lock"}
    for name in ("config.yaml", "summary.json", "experiment.txt", "metrics.jsonl", "checkpoints/best.safetensors",
                 "checkpoints/best.json", "checkpoints/last.safetensors"):
        assert name in files
    assert files == dict.fromkeys(files, 0o666 & ~umask)  # as `open(path, "w")` makes them


def test_a_resume_with_nothing_left_writes_only_a_missing_summary(tmp_path, caplog):
    """Killed after its final checkpoint, before summary.json: the resume writes the summary and nothing else."""
    import logging

    from relayrl.training.trainer import run_trainer

    first = run_trainer(tiny(), run_dir=tmp_path / "run", tensorboard=False)
    (tmp_path / "run" / "summary.json").unlink()
    before = {k: v for k, v in snapshot(tmp_path / "run").items() if k != ".lock"}
    caplog.set_level(logging.INFO, logger="relayrl")
    again = run_trainer(tiny(), run_dir=tmp_path / "run", resume=True, tensorboard=False)
    assert "already complete, nothing to train" in caplog.text and "--total-steps" in caplog.text
    after = {k: v for k, v in snapshot(tmp_path / "run").items() if k != ".lock"}
    assert after.pop("summary.json") and after == before
    for key in ("env_steps", "updates", "best_eval_return", "last_eval_return", "stop_reason"):
        assert again[key] == first[key] == read_summary(tmp_path / "run")[key], key


def test_a_resume_of_a_run_that_reached_its_stop_value_says_how_to_go_on(tmp_path, caplog):
    import logging

    from relayrl.config import build_config
    from relayrl.training.trainer import run_trainer

    config = build_config("ppo", {"env": {"id": "relayrl.testing.envs:relayrl-test/Faulty-v0"}},  # returns 10
                          ["env.num_envs=2", "ppo.num_steps=16", "ppo.batch_size=16", "ppo.epochs=1",
                           "eval.freq=32", "eval.episodes=1", "eval.num_envs=1"], {"total_steps": 640, "stop_value": 5})
    first = run_trainer(config, run_dir=tmp_path / "run", tensorboard=False)
    assert first["stop_reason"] == "stop_value" and first["env_steps"] == 32
    caplog.set_level(logging.INFO, logger="relayrl")
    again = run_trainer(config, run_dir=tmp_path / "run", resume=True, tensorboard=False)
    assert again["env_steps"] == 32 and "reached stop value 5" in caplog.text and "--stop-value" in caplog.text
    higher = run_trainer(config.model_copy(update={"stop_value": 20.0, "total_steps": 64}), run_dir=tmp_path / "run",
                         resume=True, tensorboard=False)
    assert higher["env_steps"] == 64  # a higher stop value: there is something to do again
