"""`relayrl train ... --env bridge:COMMAND --workers N`: N simulator processes, their agents as rows of one
run; one that is killed mid-run is restarted (the log names the signal) and the run goes on."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
import textwrap

import pytest

BALL3D = f"bridge:{shlex.quote(sys.executable)} -m relayrl.bridge.examples.ball3d"
TINY = ["--quiet", "--no-tensorboard", "--set", "eval.freq=0", "--set", "eval.episodes=2", "--set", "ppo.num_steps=16"]


def relayrl_train(tmp_path, *args: str, timeout: float = 300) -> tuple[subprocess.CompletedProcess, list[dict]]:
    run = subprocess.run([sys.executable, "-m", "relayrl", "train", *args, "--run-dir", str(tmp_path / "run"), *TINY],
                         capture_output=True, text=True, timeout=timeout)
    assert run.returncode == 0, run.stderr[-3000:]
    metrics = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    return run, metrics


def last(metrics: list[dict], key: str):
    return [m[key] for m in metrics if key in m][-1]


# (two C instances stepping: tests/unit/bridge/test_instances.py in the default suite)
@pytest.mark.parametrize("simulator", ["python", pytest.param("c", marks=pytest.mark.extended)])
def test_two_instances_train_as_one_run(tmp_path, simulator):
    from relayrl.bridge.cbuild import build, have_compiler

    if simulator == "c" and not have_compiler():
        pytest.skip("no C compiler ($CC or cc)")
    env = BALL3D if simulator == "python" else f"bridge:{shlex.quote(str(build('ball3d', tmp_path / 'build')))}"
    _, metrics = relayrl_train(tmp_path, "ppo", "--env", env, "--workers", "2", "--total-steps", "768",
                               "--set", "env.kwargs={args: [--agents, '3']}")
    # every agent of both instances decides every turn: 2 x 3 rows a turn
    assert last(metrics, "env_steps") == 6 * last(metrics, "env/bridge_turns")
    assert last(metrics, "env/bridge_restarts") == 0


# ball3d, except that the first copy to reach turn 40 kills itself (SIGKILL): only once per run
DIES_ONCE = textwrap.dedent("""
    import os, signal, sys
    from relayrl.bridge.examples import ball3d
    from relayrl.bridge.world import World

    marker, argv = sys.argv[1], sys.argv[2:]
    step = World.step
    turns = [0]

    def step_and_maybe_die(self):
        turns[0] += 1
        if turns[0] == 40:
            try:
                os.close(os.open(marker, os.O_CREAT | os.O_EXCL))
                os.kill(os.getpid(), signal.SIGKILL)
            except FileExistsError:
                pass
        return step(self)

    World.step = step_and_maybe_die
    sys.exit(ball3d.main(argv))
""")


def test_an_instance_that_fails_to_start_stops_the_run_with_one_message(tmp_path):
    script = tmp_path / "sim.py"
    script.write_text(textwrap.dedent("""
        import os, sys
        try:
            os.close(os.open(sys.argv[1], os.O_CREAT | os.O_EXCL))
        except FileExistsError:
            sys.exit(2)  # every copy but the first: a simulator that cannot start
        from relayrl.bridge.examples import ball3d
        sys.exit(ball3d.main(sys.argv[2:]))
    """))
    env = f"bridge:{shlex.quote(sys.executable)} {shlex.quote(str(script))} {shlex.quote(str(tmp_path / 'first'))}"
    run = subprocess.run([sys.executable, "-m", "relayrl", "train", "ppo", "--env", env, "--workers", "2",
                          "--total-steps", "64", "--run-dir", str(tmp_path / "run"), *TINY],
                         capture_output=True, text=True, timeout=120)
    errors = [line for line in run.stderr.splitlines() if line.startswith("relayrl: error:")]
    assert run.returncode == 3, run.stderr[-3000:]
    assert len(errors) == 1 and re.search(r"simulator instance [01] of 2: .*exited with code 2", errors[0]), \
        run.stderr[-3000:]
    assert "Traceback" not in run.stderr


def test_a_killed_instance_is_restarted_and_the_run_goes_on(tmp_path):
    script = tmp_path / "sim.py"
    script.write_text(DIES_ONCE)
    env = f"bridge:{shlex.quote(sys.executable)} {shlex.quote(str(script))} {shlex.quote(str(tmp_path / 'died'))}"
    run, metrics = relayrl_train(tmp_path, "ppo", "--env", env, "--workers", "2", "--total-steps", "1536",
                                 "--set", "env.kwargs={args: [--agents, '3']}")
    assert (tmp_path / "died").exists(), "the simulator did not kill itself: the test proves nothing"
    warnings = [line for line in run.stderr.splitlines() if "restarting it" in line]
    assert len(warnings) == 1 and "was killed by signal 9 (SIGKILL)" in warnings[0], run.stderr[-3000:]
    assert last(metrics, "env/bridge_restarts") == 1
    assert last(metrics, "env_steps") >= 1536
