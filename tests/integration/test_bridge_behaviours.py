"""Every behaviour of a simulator trained in one run (relayrl/training/behaviours.py): the command docs/bridge.md
shows (two behaviours on two instances of the example simulator), per-behaviour overrides, results named per
behaviour for eval, load and export, a resumed run, and the config mistakes refused before anything is written."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import relayrl

ROOT = Path(__file__).resolve().parents[2]
SCENE = f"bridge:{shlex.quote(sys.executable)} -m relayrl.bridge.examples.two_behaviours"
QUIET = ["--quiet", "--no-tensorboard"]


def relayrl_cli(*args: str, cwd: Path | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "relayrl", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=timeout)


def documented_command() -> list[str]:
    text = (ROOT / "docs" / "bridge.md").read_text()
    block = re.search(r"<!-- two-behaviours -->\s*```bash\n(.+?)\n```", text, re.S)
    assert block, "docs/bridge.md lost its <!-- two-behaviours --> command"
    argv = shlex.split(block.group(1))
    assert argv[:2] == ["relayrl", "train"] and "--workers" in argv
    return [sys.executable, "-m", "relayrl", *argv[1:]]


def test_the_documented_two_behaviour_run_trains_each_behaviour_with_its_own_policy_and_overrides(tmp_path):
    run = subprocess.run(documented_command() + ["--quiet"], capture_output=True, text=True, cwd=tmp_path,
                         timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    [run_dir] = (tmp_path / "runs").iterdir()
    summary = json.loads((run_dir / "summary.json").read_text())
    parts = summary["behaviours"]
    assert list(parts) == ["ball", "reach"]
    assert parts["ball"]["env_steps"] >= 12000 and parts["reach"]["env_steps"] >= 24000  # each its own budget
    assert summary["env_steps"] == parts["ball"]["env_steps"] + parts["reach"]["env_steps"]
    # both learned (random play: ball falls within ~20 steps, reach ~0.0; measured over seeds 0-3: 50 and 0.9-1.0)
    assert parts["ball"]["last_eval_return"] > 40 and parts["reach"]["last_eval_return"] > 0.6
    configs = {name: (run_dir / "behaviours" / name / "config.yaml").read_text() for name in parts}
    assert "actor_lr: 0.001" in configs["reach"] and "actor_lr: 0.001" not in configs["ball"]
    for name in parts:
        folder = run_dir / "behaviours" / name
        rows = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
        assert any("train/loss/policy" in r and 0 < r["time/steps_per_s"] < 1e6 for r in rows)
        assert (folder / "checkpoints" / "best.safetensors").is_file()
    assert "behaviour reach:" in run.stdout and "behaviour ball:" in run.stdout

    # eval, load and export take the behaviour, and say which exist when it is missing
    missing = relayrl_cli("eval", str(run_dir), "--episodes", "2")
    assert missing.returncode == 2 and "['ball', 'reach']" in missing.stderr and "--behaviour" in missing.stderr
    assert "Traceback" not in missing.stderr
    typo = relayrl_cli("export", str(run_dir), "--behaviour", "raech", "--format", "torchscript")
    assert typo.returncode == 2 and "no behaviour 'raech'" in typo.stderr
    evaluated = relayrl_cli("eval", str(run_dir), "--behaviour", "reach", "--episodes", "8")
    assert evaluated.returncode == 0, evaluated.stderr
    mean = float(re.search(r"return (-?[\d.]+)", evaluated.stdout).group(1))
    assert mean > 0.5  # the other behaviour acts with its own policy meanwhile
    exported = relayrl_cli("export", str(run_dir), "--behaviour", "ball", "--format", "torchscript")
    assert exported.returncode == 0, exported.stderr
    assert (run_dir / "policy_ball.pt").is_file()
    reach = relayrl.load(run_dir, behaviour="reach")  # no simulator: the checkpoint records the spaces
    assert reach.action_space.n == 3 and reach.predict(np.array([0.5, 0.0], np.float32)) == 0  # target to the left
    with pytest.raises(relayrl.errors.CheckpointError, match="trained the behaviours"):
        relayrl.load(run_dir)


def test_the_c_sdk_example_with_two_behaviours_trains_both(tmp_path):
    from relayrl.bridge.cbuild import build, have_compiler

    if not have_compiler():
        pytest.skip("no C compiler ($CC or cc)")
    sim = build("ball3d", tmp_path / "build")
    run_dir = tmp_path / "run"
    run = relayrl_cli("train", "ppo", "--env", f"bridge:{shlex.quote(str(sim))} --groups 2 --agents 6",
                      "--total-steps", "8000", "--run-dir", str(run_dir), *QUIET)
    assert run.returncode == 0, run.stderr[-3000:]
    parts = json.loads((run_dir / "summary.json").read_text())["behaviours"]
    assert list(parts) == ["ball3d", "ball3d_1"]
    # a ball left alone falls within ~20 steps (return ~1); seeds 0-3 gave 21.6-50 for both at 6,000-8,000 steps
    assert all(part["last_eval_return"] > 10 for part in parts.values()), parts


def test_a_resumed_run_trains_on_while_a_finished_behaviour_keeps_acting(tmp_path):
    run_dir = tmp_path / "run"
    first = relayrl_cli("train", "ppo", "--env", SCENE, "--total-steps", "1024", "--run-dir", str(run_dir), *QUIET,
                        "--set", "eval.freq=0", "--set", "eval.episodes=2",
                        "--set", "behaviours={reach: {total_steps: 1024, ppo: {num_steps: 32}}}")
    assert first.returncode == 0, first.stderr[-3000:]
    ball_rows = (run_dir / "behaviours" / "ball" / "metrics.jsonl").read_text().count('"train"')
    reach_rows = (run_dir / "behaviours" / "reach" / "metrics.jsonl").read_text().count('"train"')
    assert ball_rows == 1024 // (64 * 8) and reach_rows == 1024 // (32 * 8)  # every rollout learned from, once
    again = relayrl_cli("train", "--resume", str(run_dir), "--total-steps", "2048", *QUIET)
    assert again.returncode == 0, again.stderr[-3000:]
    parts = json.loads((run_dir / "summary.json").read_text())["behaviours"]
    assert parts["ball"]["env_steps"] == 2048 and parts["reach"]["env_steps"] == 1024  # reach's own budget


def test_a_behaviour_may_train_with_another_algorithm(tmp_path):
    run_dir = tmp_path / "run"
    run = relayrl_cli("train", "ppo", "--env", SCENE, "--total-steps", "512", "--run-dir", str(run_dir), *QUIET,
                      "--set", "eval.freq=0", "--set", "eval.episodes=2",
                      "--set", "behaviours={ball: {algo: sac, sac: {batch_size: 32, start_training: 64}}}")
    assert run.returncode == 0, run.stderr[-3000:]
    parts = json.loads((run_dir / "summary.json").read_text())["behaviours"]
    assert parts["ball"]["algo"] == "sac" and parts["reach"]["algo"] == "ppo"
    assert parts["ball"]["updates"] > 0 and parts["reach"]["updates"] > 0
    assert "batch_size: 32" in (run_dir / "behaviours" / "ball" / "config.yaml").read_text()
    assert relayrl.load(run_dir, behaviour="ball").predict(np.zeros(6, np.float32)).shape == (2,)


@pytest.mark.parametrize("algo, sets, says", [
    ("dqn", [], r"behaviour 'ball': DQN needs a Discrete.*behaviours=\{ball: \{algo: NAME\}\}"),
    ("ppo", ["--set", "behaviours={ball: {algo: iql}}"], r"behaviours.ball.algo: iql learns from a dataset"),
])
def test_an_algorithm_a_behaviour_cannot_use_is_named_with_the_fix(tmp_path, algo, sets, says):
    run = relayrl_cli("train", algo, "--env", SCENE, "--total-steps", "256", "--run-dir", str(tmp_path / "run"),
                      *QUIET, *sets)
    assert run.returncode == 2, run.stderr[-2000:]
    assert re.search(says, run.stderr) and "Traceback" not in run.stderr
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("sets, says", [
    (["--set", "behaviours={raech: {total_steps: 10}}"], r"names \['raech'\].*trains \['ball', 'reach'\]"),
    (["--set", "behaviours={reach: {seed: 3}}"], r"behaviours.reach: \['seed'\] cannot differ"),
    (["--set", "behaviours={reach: {ppo: {lr: 0.1}}}"], r"behaviours.reach: .*ppo.lr.*actor_lr"),
    (["--set", "env.kwargs={behaviour: walker}"], r"no behaviour 'walker'.*\['ball', 'reach'\]"),
])
def test_a_behaviour_mistake_is_one_message_and_writes_nothing(tmp_path, sets, says):
    run = relayrl_cli("train", "ppo", "--env", SCENE, "--total-steps", "256", "--run-dir", str(tmp_path / "run"),
                      *QUIET, *sets)
    assert run.returncode == 2, run.stderr[-2000:]
    assert re.search(says, run.stderr) and "Traceback" not in run.stderr
    assert not (tmp_path / "run").exists()


def test_ctrl_c_stops_every_behaviour_with_its_last_checkpoint(tmp_path):
    import os
    import signal
    import time

    run_dir = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-m", "relayrl", "train", "ppo", "--env", SCENE, "--total-steps",
                             "10000000", "--run-dir", str(run_dir), *QUIET, "--set", "eval.freq=0"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        metrics = [run_dir / "behaviours" / name / "metrics.jsonl" for name in ("ball", "reach")]
        while not all(m.is_file() and m.stat().st_size for m in metrics):  # both have learned at least once
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[1][-2000:]
            time.sleep(0.2)
        os.killpg(proc.pid, signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130, err[-2000:]
    assert "Traceback" not in err
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["stop_reason"] == "interrupted"
    for name, part in summary["behaviours"].items():
        assert part["stop_reason"] == "interrupted" and part["env_steps"] > 0
        assert (run_dir / "behaviours" / name / "checkpoints" / "last.safetensors").is_file()
