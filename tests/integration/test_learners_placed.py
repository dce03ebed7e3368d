"""`relayrl train --learners N`: N real learner processes (gloo on 127.0.0.1) under a supervisor, one run
directory, the group's env steps; a learner that dies or hangs ends the run naming it (or restarts the group);
Ctrl-C stops them all; resume with the same or another N; torchrun starting the learners itself."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from learner_procs import (LONG, PPO, QUICK, Supervised, assert_nothing_left, records, run_files, session_processes,
                           train)

def test_ppo_two_learners_write_one_run_of_the_groups_steps(tmp_path):
    run_dir = tmp_path / "run"
    result = train(*PPO, "--learners", "2", "--total-steps", "1024", "--run-dir", str(run_dir))
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["env_steps"] == 1024 and summary["stop_reason"] == "total_steps"
    # each round is both learners' 32 x 2 steps: 1024 steps in 8 rounds (one learner's count would take 16)
    assert [record["iteration"] for record in records(run_dir)] == list(range(1, 9))
    assert [record["env_steps"] for record in records(run_dir)] == [128 * i for i in range(1, 9)]
    assert run_files(run_dir) - {".lock"} == {  # one run's files, none per learner
        "config.yaml", "experiment.txt", "metrics.jsonl", "summary.json", "checkpoints", "checkpoints/best.json",
        "checkpoints/best.safetensors", "checkpoints/last.json", "checkpoints/last.safetensors"}
    assert "learners: 2" in (run_dir / "config.yaml").read_text()
    # both learners' episodes reach the log: their steps add up to more than one learner's 512
    finished = sum(record.get("train/episodes", 0) * record.get("train/length_mean", 0) for record in records(run_dir))
    assert 600 < finished <= 1024
    assert summary["env_steps_per_s"] == pytest.approx(1024 / summary["wall_time_s"], rel=0.01)


def test_ppo_prenorm_warm_up_counts_both_learners_steps(tmp_path):
    run_dir = tmp_path / "run"
    result = train(*PPO, "--learners", "2", "--total-steps", "256", "--run-dir", str(run_dir), "--set",
                   "ppo.obs_norm=true", "--set", "ppo.prenorm=true", "--set", "ppo.prenormalize_steps=16")
    assert result.returncode == 0, result.stderr[-3000:]
    # the warm-up is 16 vector steps of each learner's 2 envs (one learner's run: of its 4), then rounds of 128
    assert [record["env_steps"] for record in records(run_dir)] == [64 + 128, 64 + 256]


def test_dqn_two_learners_count_both_learners_steps(tmp_path):
    import relayrl

    run_dir = tmp_path / "run"
    run = relayrl.train("dqn", "CartPole-v1", {"env.num_envs": 4, "env.manager": "sync", "dqn.steps_per_iteration": 8,
                                               "dqn.start_training": 64, "dqn.batch_size": 32, "dqn.buffer_size": 200,
                                               "eval.episodes": 2, "eval.num_envs": 2}, learners=2, total_steps=640,
                        run_dir=run_dir, tensorboard=False)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["env_steps"] == run.summary["env_steps"] == 640
    logged = records(run_dir)
    assert [record["env_steps"] for record in logged] == [32 * i for i in range(1, 21)]  # both learners' 8 x 2
    assert summary["updates"] > 0 and logged[-1]["updates"] == summary["updates"]
    # each learner's replay holds its share of buffer_size (learner 0 logs its own: 320 transitions came its way)
    assert max(record["train/replay/size"] for record in logged) == 100


def test_refused_before_anything_is_written(tmp_path):
    run_dir = tmp_path / "run"
    # refused by the supervisor (tests/unit/training/test_learner_group.py has the rest), and by the learners
    # themselves once they have built the algorithm (bind_learners), still before learner 0 writes anything
    for options, named in [(["--set", "env.num_envs=3"], "env.num_envs=3"),
                           (["--set", "ppo.recurrent=lstm"], "ppo.recurrent=lstm cannot be shared by 2 learners")]:
        result = train("ppo", "--env", "CartPole-v1", "--learners", "2", "--run-dir", str(run_dir), *options, *QUICK)
        assert result.returncode == 2, (options, result.stderr[-2000:])
        assert named in result.stderr and "Traceback" not in result.stderr
        assert not run_dir.exists()
    result = train("td3", "--env", "Pendulum-v1", "--learners", "2", "--run-dir", str(run_dir), *QUICK)
    assert result.returncode == 2 and "data_parallel" in result.stderr and not run_dir.exists()


# ---------------------------------------------------------------- faults: real processes, real signals


@pytest.mark.parametrize("how", ["killed", "stopped"])
def test_a_learner_that_dies_or_hangs_ends_the_run_naming_it(tmp_path, how):
    run = Supervised(tmp_path, *LONG, "--learners", "2")
    try:
        pids = run.learner_pids()
        run.wait_for_checkpoint()
        os.kill(pids[1], signal.SIGKILL if how == "killed" else signal.SIGSTOP)
        code, took = run.wait(deadline_s=90)
    finally:
        run.close()
    err = run.stderr()
    assert code == 1, err[-3000:]
    assert took < 60, f"ended {took:.0f} s after the fault (learner_timeout_s=6)"
    message = [line for line in err.splitlines() if line.startswith("relayrl: error:")]
    assert len(message) == 1, err[-3000:]
    assert f"learner 1 of 2 (pid {pids[1]})" in message[0]
    assert ("killed by SIGKILL" if how == "killed" else "stopped making progress") in message[0]
    assert "--resume" in message[0] and "max_learner_restarts" in message[0]
    assert "Traceback" not in err
    assert (run.run_dir / "checkpoints" / "last.safetensors").is_file()
    assert_nothing_left(run.proc.pid)


def test_max_learner_restarts_restarts_the_group_from_the_last_checkpoint(tmp_path):
    args = [*PPO, "--total-steps", "6400", "--set", "eval.freq=128", "--set", "learner_timeout_s=6",
            "--set", "max_learner_restarts=1", "--learners", "2"]
    run = Supervised(tmp_path, *args)
    try:
        pids = run.learner_pids()
        run.wait_for_checkpoint()
        os.kill(pids[1], signal.SIGKILL)
        code, _ = run.wait(deadline_s=120)
    finally:
        run.close()
    err = run.stderr()
    assert code == 0, err[-3000:]
    assert f"learner 1 of 2 (pid {pids[1]}) was killed by SIGKILL" in err and "restarting the 2 learners" in err
    summary = json.loads((run.run_dir / "summary.json").read_text())
    assert summary["learner_restarts"] == 1 and summary["env_steps"] == 6400
    last = json.loads((run.run_dir / "checkpoints" / "last.json").read_text())
    assert last["run"]["resumes"] == 1  # the second group resumed the run
    assert_nothing_left(run.proc.pid)


@pytest.mark.parametrize("how", ["ctrl-c", pytest.param("sigterm", marks=pytest.mark.extended)])  # (the same flag)
def test_ctrl_c_or_sigterm_stops_every_learner_and_saves(tmp_path, how):
    run = Supervised(tmp_path, *LONG, "--learners", "2")
    try:
        run.learner_pids()
        run.wait_for_checkpoint()
        if how == "ctrl-c":
            os.killpg(run.proc.pid, signal.SIGINT)  # (a terminal's Ctrl-C: the whole foreground group)
        else:
            run.proc.send_signal(signal.SIGTERM)  # (a scheduler's stop, to the process it started)
        code, _ = run.wait(deadline_s=60)
    finally:
        run.close()
    err = run.stderr()
    assert code == (130 if how == "ctrl-c" else 143), err[-3000:]
    summary = json.loads((run.run_dir / "summary.json").read_text())
    assert summary["stop_reason"] == ("interrupted" if how == "ctrl-c" else "terminated")
    last = json.loads((run.run_dir / "checkpoints" / "last.json").read_text())
    assert last["run"]["env_steps"] == summary["env_steps"]  # the last checkpoint is the stop's
    assert "Traceback" not in err
    assert_nothing_left(run.proc.pid)


@pytest.mark.parametrize("first,then", [(2, 1), pytest.param(1, 2, marks=pytest.mark.extended)])  # (2 -> 1 loads
# learner 0's checkpoint into one learner; 1 -> 2 into two, the same broadcast as a fresh group's)
def test_resume_with_another_number_of_learners(tmp_path, first, then):
    run_dir = tmp_path / "run"
    result = train(*PPO, "--learners", str(first), "--total-steps", "512", "--run-dir", str(run_dir))
    assert result.returncode == 0, result.stderr[-3000:]
    result = subprocess.run([sys.executable, "-m", "relayrl", "train", "--resume", str(run_dir), "--learners",
                             str(then), "--total-steps", "1024", "--quiet", "--no-tensorboard"],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["env_steps"] == 1024
    logged = records(run_dir)
    assert [record["env_steps"] for record in logged] == [128 * i for i in range(1, 9)]  # 4 rounds, then 4 more
    assert "learners: " + str(then) in (run_dir / "config.yaml").read_text()


@pytest.mark.skipif(shutil.which("true") is None, reason="needs a POSIX system")
def test_torchrun_starts_the_learners_itself(tmp_path):
    run_dir = tmp_path / "run"
    env = {key: value for key, value in os.environ.items() if key not in ("RANK", "WORLD_SIZE", "MASTER_ADDR",
                                                                          "MASTER_PORT", "LOCAL_RANK")}
    result = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
                             "--master-port", str(_free_port()), "--module", "relayrl", "train", *PPO,
                             "--learners", "2", "--total-steps", "512", "--run-dir", str(run_dir)],
                            capture_output=True, text=True, timeout=180, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["env_steps"] == 512
    assert [record["env_steps"] for record in records(run_dir)] == [128 * i for i in range(1, 5)]
    assert not (tmp_path / "runs").exists()


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_a_killed_supervisor_leaves_no_learner_behind(tmp_path):
    run = Supervised(tmp_path, *LONG, "--learners", "2")
    try:
        pids = run.learner_pids()
        run.wait_for_checkpoint()
        run.proc.kill()  # (SIGKILL to `relayrl train` alone: no chance to end its learners itself)
        run.proc.wait()
        end = time.monotonic() + 10
        while any(Path(f"/proc/{pid}").exists() and pid in session_processes(run.proc.pid) for pid in pids.values()) \
                and time.monotonic() < end:
            time.sleep(0.1)
        assert not [pid for pid in pids.values() if pid in session_processes(run.proc.pid)]
    finally:
        run.close()
