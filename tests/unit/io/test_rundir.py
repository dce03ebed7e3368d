"""relayrl.io.rundir: run directory names and summary.json."""

from __future__ import annotations

import json

import pytest

from relayrl.io import rundir
from relayrl.io.rundir import SUMMARY_KEYS, new_run_dir, read_summary, write_summary


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
