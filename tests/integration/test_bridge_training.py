"""Training through the simulator bridge: `relayrl train ... --env bridge:COMMAND` against the 3DBall-like
example simulator (a separate process, real shared memory)."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys

import pytest

BALL3D = f"bridge:{shlex.quote(sys.executable)} -m relayrl.bridge.examples.ball3d"


def relayrl_train(tmp_path, *args: str, timeout: float = 600) -> dict:
    run = subprocess.run([sys.executable, "-m", "relayrl", "train", *args, "--run-dir", str(tmp_path / "run"),
                          "--quiet", "--no-tensorboard"], capture_output=True, text=True, timeout=timeout)
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads((tmp_path / "run" / "summary.json").read_text())


def test_ppo_balances_the_python_3dball_through_the_bridge(tmp_path):
    summary = relayrl_train(tmp_path, "ppo", "--env", BALL3D, "--stop-value", "45", "--total-steps", "60000",
                            "--set", "eval.freq=3072", "--set", "eval.episodes=12")
    assert summary["solved"] and summary["best_eval_return"] >= 45, summary
    assert summary["env_steps_to_stop_value"] <= 60000
    # relayrl eval launches the simulator again for a saved run
    ev = subprocess.run([sys.executable, "-m", "relayrl", "eval", str(tmp_path / "run"), "--episodes", "6"],
                        capture_output=True, text=True, timeout=300)
    assert ev.returncode == 0, ev.stderr[-2000:]
    assert ev.stdout.startswith(f"{BALL3D}: return ") and "over 6 episodes" in ev.stdout
    assert float(ev.stdout.split("return ")[1].split(" ")[0]) >= 45


def test_ppo_balances_the_c_3dball_through_the_bridge(tmp_path):
    """The same task, simulated by the C example (relayrl/bridge/c/examples/ball3d.c)."""
    from relayrl.bridge.cbuild import build

    exe = build("ball3d", tmp_path / "build")
    summary = relayrl_train(tmp_path, "ppo", "--env", f"bridge:{shlex.quote(str(exe))}", "--stop-value", "45",
                            "--total-steps", "60000", "--set", "eval.freq=3072", "--set", "eval.episodes=12")
    assert summary["solved"] and summary["best_eval_return"] >= 45, summary


def test_sac_learns_from_the_bridge(tmp_path):
    """SAC's one-step transitions from agent turns: it runs, updates and evaluates."""
    summary = relayrl_train(tmp_path, "sac", "--env", BALL3D, "--total-steps", "600", "--set", "sac.start_training=200",
                            "--set", "eval.freq=0", "--set", "eval.episodes=3", "--set", "sac.batch_size=64",
                            "--set", "env.kwargs={args: [--agents, '4']}")
    assert summary["env_steps"] >= 600 and summary["updates"] > 0
    assert summary["last_eval_return"] is not None


@pytest.mark.parametrize("simulator", ["python", "c"])
def test_a_run_that_pauses_longer_than_both_timeouts_keeps_both_simulators(tmp_path, simulator):
    """Issue 13: with eval.freq=0 the evaluation copy waits from the start to the one evaluation at the
    end, and the training copy waits through every update. Timeouts of 1 s on both sides and a first
    update that takes 3 s: both copies are kept waiting by the trainer's keep-alive, and the run ends
    with its evaluation done."""
    import time

    from relayrl import launch
    from relayrl.bridge.cbuild import build, have_compiler
    from relayrl.config import build_config

    if simulator == "c" and not have_compiler():
        pytest.skip("no C compiler ($CC or cc)")
    env_id = BALL3D if simulator == "python" else f"bridge:{shlex.quote(str(build('ball3d', tmp_path / 'build')))}"
    config = build_config("ppo", None, ["eval.freq=0", "eval.episodes=2", "total_steps=512",
                                        "env.kwargs={timeout_s: 1, args: [--bridge-timeout, '1', --agents, '4']}"],
                          {"env.id": env_id})
    paused = []

    def long_update(ctx) -> None:
        if not paused:
            paused.append(ctx.env_steps)
            time.sleep(3.0)

    summary = launch.run(config, run_dir=tmp_path / "run", tensorboard=False,
                         hooks=[("after_iter", long_update, {})])
    assert paused == [256] and summary["env_steps"] >= 512, summary
    assert summary["last_eval_return"] is not None, summary


def test_a_bridge_command_that_fails_is_one_clear_message(tmp_path):
    run = subprocess.run([sys.executable, "-m", "relayrl", "train", "ppo", "--env", "bridge:/no/such/simulator",
                          "--run-dir", str(tmp_path / "run"), "--quiet"], capture_output=True, text=True, timeout=120)
    assert run.returncode == 2 and "the simulator command '/no/such/simulator' was not found" in run.stderr
    assert "Traceback" not in run.stderr


@pytest.mark.parametrize("sets, message", [
    (["env.kwargs={behavior: x}"], "do not apply to a bridge simulator"),
    (["env.kwargs={behaviour: nope}"], "no behaviour 'nope'"),
    (["ppo.prenorm=true"], "prenorm does not apply"),
])
def test_bridge_options_are_checked(tmp_path, sets, message):
    from relayrl import launch
    from relayrl.config import build_config
    from relayrl.errors import ConfigError

    config = build_config("ppo", None, sets, {"env.id": BALL3D})
    with pytest.raises(ConfigError, match=message):
        launch.run(config, run_dir=tmp_path / "run", tensorboard=False)
    assert not (tmp_path / "run").exists()  # refused before the run directory is written
