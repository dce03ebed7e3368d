"""Every way `relayrl train` can fail exits non-zero with one `relayrl: error:` line (docs/usage.md, exit
codes), and a run that fails while running still writes its summary with the reason."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
import textwrap

import pytest

# A simulator that plays a few turns of a one-agent world, then misbehaves as told by its first argument.
SIMULATOR = textwrap.dedent("""
    import os, sys, time
    import numpy as np
    from relayrl.bridge.world import CLOSED, World

    how = sys.argv[1]
    with World(behaviours=[dict(name="b", max_agents=1, observations=[(2,)], branches=(2,))]) as world:
        for t in range(40):
            world.request_decision("b", 0).set_observation(0, [0.0, t]).set_reward(1.0)
            if world.step() == CLOSED:
                sys.exit(0)
        if how == "close":  # stops normally in the middle of training: closes with reason 1
            sys.exit(0)
        if how == "die":
            os._exit(9)
        if how == "hang":
            time.sleep(600)
""")

TINY = ["--set", "env.num_envs=2", "--set", "eval.episodes=1", "--set", "eval.num_envs=1", "--quiet",
        "--no-tensorboard"]


def relayrl_train(tmp_path, *args, timeout=180):
    run = subprocess.run([sys.executable, "-m", "relayrl", "train", *map(str, args), "--run-dir",
                          str(tmp_path / "run"), *TINY], capture_output=True, text=True, timeout=timeout)
    summary_file = tmp_path / "run" / "summary.json"
    return run, json.loads(summary_file.read_text()) if summary_file.is_file() else None


def assert_one_error_line(run, code, text):
    assert run.returncode == code, (run.returncode, run.stderr[-2000:])
    errors = [line for line in run.stderr.splitlines() if line.startswith("relayrl: error:")]
    assert len(errors) == 1 and text in errors[0], run.stderr[-2000:]
    assert "Traceback" not in run.stderr


@pytest.mark.parametrize("how, code, text", [
    ("close", 1, "the simulator closed the channel"),
    ("die", 3, "died"),
    ("hang", 3, "did not answer within 3 s"),
])
def test_a_simulator_that_stops_mid_run_fails_the_run(tmp_path, how, code, text):
    script = tmp_path / "sim.py"
    script.write_text(SIMULATOR)
    env = f"bridge:{shlex.quote(sys.executable)} {shlex.quote(str(script))} {how}"
    run, summary = relayrl_train(tmp_path, "ppo", "--env", env, "--total-steps", 100_000,
                                 "--set", "ppo.num_steps=16", "--set", "env.kwargs={timeout_s: 3}")
    assert_one_error_line(run, code, text)
    assert summary["stop_reason"] == "error"


def test_an_env_that_keeps_failing_fails_the_run(tmp_path):
    run, summary = relayrl_train(tmp_path, "ppo", "--env", "relayrl.testing.envs:relayrl-test/Faulty-v0",
                                 "--set", "env.kwargs={raise_at: 5}", "--set", "env.max_restarts=0",
                                 "--set", "env.manager=sync", "--set", "ppo.num_steps=16", "--total-steps", 512)
    assert_one_error_line(run, 1, "injected failure at step 5")
    assert summary["stop_reason"] == "error"


def test_a_non_finite_loss_fails_the_run(tmp_path):
    run, summary = relayrl_train(tmp_path, "ppo", "--env", "relayrl.testing.envs:relayrl-test/HugeReward-v0",
                                 "--set", "ppo.normalize_reward=false", "--set", "ppo.num_steps=16",
                                 "--set", "ppo.batch_size=16", "--total-steps", 640)
    assert_one_error_line(run, 1, "loss became")
    assert summary["stop_reason"] == "nonfinite"


def test_a_simulator_command_that_does_not_exist_is_bad_input(tmp_path):
    run, _ = relayrl_train(tmp_path, "ppo", "--env", "bridge:./no_such_simulator --fast", "--total-steps", 64)
    assert_one_error_line(run, 2, "the simulator command './no_such_simulator' was not found")


def test_a_run_directory_in_use_is_bad_input(tmp_path, tiny_config):
    from relayrl import launch
    from relayrl.io.rundir import RunLock

    launch.run(tiny_config(total_steps=64), run_dir=tmp_path / "run", tensorboard=False)
    with RunLock(tmp_path / "run"):
        run = subprocess.run([sys.executable, "-m", "relayrl", "train", "ppo", "--resume", str(tmp_path / "run"),
                              "--total-steps", "128", "--quiet"], capture_output=True, text=True, timeout=120)
    assert_one_error_line(run, 2, "is in use by another relayrl process")


# ---- a user's own modules, run as the `relayrl` console script runs (its folder, not the working folder, is
# first on sys.path), from the folder that holds them

USER_ENV = textwrap.dedent("""
    import gymnasium as gym
    import numpy as np


    class Walk(gym.Env):
        observation_space = gym.spaces.Box(-1, 1, (3,), np.float32)
        action_space = gym.spaces.Discrete(2)

        def __init__(self, mistake="none"):
            self.mistake, self.t = mistake, 0

        def reset(self, *, seed=None, options=None):
            super().reset(seed=seed)
            self.t = 0
            return np.zeros(3, np.float32), {}

        def step(self, action):
            self.t += 1
            obs = np.zeros(5 if self.mistake == "shape" and self.t == 9 else 3, np.float32)
            reward = float("nan") if self.mistake == "nan" and self.t == 7 else 1.0
            return obs, reward, False, self.t >= 20, {}


    def make_env(mistake="none"):
        return Walk(mistake)


    def make_raises():
        raise RuntimeError("no simulator licence found")
""")
USER_ALGO = textwrap.dedent("""
    from relayrl.algos import register
    from relayrl.algos.ppo import PPO, PPOConfig, PPOPolicy

    register("myppo", PPOConfig, PPO, PPOPolicy, on_policy=True)
""")
USER_NET = textwrap.dedent("""
    import torch.nn as nn


    def build(observation_space, action_space):
        return nn.Sequential(nn.Linear(3, 16), nn.Tanh())
""")
CONSOLE_SCRIPT = "import sys\nfrom relayrl.cli import main\nif __name__ == '__main__':\n    sys.exit(main())\n"


def relayrl_from(folder, tmp_path, *args, timeout=180):
    """``relayrl ARGS`` run in ``folder`` through a console script like the one pip writes."""
    script = tmp_path / "bin" / "relayrl"
    script.parent.mkdir(exist_ok=True)
    script.write_text(CONSOLE_SCRIPT)
    return subprocess.run([sys.executable, str(script), *map(str, args), "--run-dir", str(tmp_path / "run"), *TINY],
                          cwd=folder, capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def project(tmp_path):
    folder = tmp_path / "project"
    folder.mkdir()
    for name, text in (("mymod", USER_ENV), ("myalgo", USER_ALGO), ("mynet", USER_NET)):
        (folder / f"{name}.py").write_text(text)
    return folder


def _line(path, text):
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if text in line)


def test_train_imports_user_modules_from_the_working_folder_in_every_process(project, tmp_path):
    # the algorithm, the network and the env by name; env workers (subproc) and rollout workers (mp) too
    run = relayrl_from(project, tmp_path, "train", "myalgo:myppo", "--env", "mymod:make_env", "--workers", 2,
                       "--set", "env.manager=subproc", "--set", "myppo.encoder=mynet:build",
                       "--set", "myppo.num_steps=16", "--total-steps", 128)
    assert run.returncode == 0, run.stderr[-3000:]
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["algo"] == "myalgo:myppo" and summary["env_steps"] >= 128


def test_a_user_module_that_is_not_there_names_the_folder_searched_and_the_fix(project, tmp_path):
    run = relayrl_from(project, tmp_path, "train", "ppo", "--env", "mymodd:make_env", "--total-steps", 64)
    assert_one_error_line(run, 2, f"env 'mymodd:make_env': cannot import module 'mymodd' (ModuleNotFoundError: No "
                                  f"module named 'mymodd'): no mymodd.py (nor mymodd/ package) in the working folder "
                                  f"{project}")
    assert "PYTHONPATH" in run.stderr


def test_a_user_env_mistake_in_rollout_worker_processes_is_one_message(project, tmp_path):
    # (the other mistakes travel the same way: tests/unit/envs/test_env_checks.py checks them on each manager)
    run = relayrl_from(project, tmp_path, "train", "ppo", "--env", "mymod:make_env", "--workers", 2,
                       "--set", "env.kwargs={mistake: nan}", "--set", "ppo.num_steps=16", "--total-steps", 100_000)
    assert_one_error_line(run, 2, "env 0 (mymod:make_env) returned reward nan at step 7 of its episode")
    assert f"Walk.step at {project / 'mymod.py'}:{_line(project / 'mymod.py', 'def step')}" in run.stderr


def test_a_user_env_factory_that_raises_is_one_message_at_its_line(project, tmp_path):
    run = relayrl_from(project, tmp_path, "train", "ppo", "--env", "mymod:make_raises", "--total-steps", 64)
    assert_one_error_line(run, 2, "RuntimeError: no simulator licence found (at "
                                  f"{project / 'mymod.py'}:{_line(project / 'mymod.py', 'raise RuntimeError')} in "
                                  "make_raises)")


def _live_parents() -> dict[int, int]:
    """pid -> parent pid of every live (not zombie) process, from /proc (no psutil)."""
    from pathlib import Path

    parents = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if fields[0] != "Z":
                parents[int(entry.name)] = int(fields[1])
    return parents


def _descendants_of(pid: int) -> set[int]:
    parents = _live_parents()
    found, frontier = set(), {pid}
    while frontier:
        frontier = {p for p, pp in parents.items() if pp in frontier} - found
        found |= frontier
    return found


LIBRARY_RUN = """
import sys
import relayrl
relayrl.train("ppo", "CartPole-v1", {"env": {"num_envs": 2}, "eval": {"episodes": 1, "num_envs": 1}},
              run_dir=sys.argv[1], total_steps=10_000_000, backend="mp", workers=2, tensorboard=False)
"""


@pytest.mark.parametrize("to", ["learner", "group", "library"])
def test_sigterm_stops_like_ctrl_c_with_a_checkpoint_a_summary_and_exit_143(tmp_path, to):
    """Schedulers stop a job with SIGTERM, then SIGKILL after a grace of seconds: Kubernetes signals the
    container's first process (the learner), Slurm and systemd every process of the job (the group:
    rollout workers and the fork server too). Either way the run stops as on Ctrl-C, within 30 s
    (Kubernetes' and Slurm's default grace), and leaves no process behind; ``relayrl.train`` in a
    script (library) as ``relayrl train`` does."""
    import os
    import signal
    import time

    run_dir = tmp_path / "run"
    command = ([sys.executable, "-c", LIBRARY_RUN, str(run_dir)] if to == "library" else
               [sys.executable, "-m", "relayrl", "train", "ppo", "--env", "CartPole-v1", "--backend", "mp",
                "--workers", "2", "--total-steps", "10000000", "--run-dir", str(run_dir), *TINY])
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        metrics = run_dir / "metrics.jsonl"
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not (metrics.exists() and metrics.read_text().count("\n") >= 3):
            time.sleep(0.1)
        children = _descendants_of(proc.pid)
        assert len(children) >= 3  # the fork server and two workers
        if to != "learner":
            os.killpg(proc.pid, signal.SIGTERM)
        else:
            proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 143, err[-2000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["stop_reason"] == "terminated" and summary["env_steps"] > 0
    last = json.loads((run_dir / "checkpoints" / "last.json").read_text())
    assert last["run"]["env_steps"] == summary["env_steps"]
    assert "Traceback" not in err and "SIGTERM" in err
    deadline = time.monotonic() + 10
    while children & set(_live_parents()) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not children & set(_live_parents()), "processes outlived the run"
