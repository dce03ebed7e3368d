"""`--learners 2` with `learner_placement: ray`: a learner per Ray actor (a local Ray the run starts and stops), the
same run as with local processes; a learner whose actor is killed ends the run naming it."""

from __future__ import annotations

import json
import os
import signal

import pytest

pytest.importorskip("ray")

from learner_procs import LONG, PPO, Supervised, records, train  # noqa: E402 (same folder)

pytestmark = pytest.mark.ray
RAY = ["--set", "learner_placement=ray"]


@pytest.mark.extended  # (the killed-actor test below starts the learners on Ray and waits for a checkpoint too)
def test_ppo_learners_on_ray_actors_write_one_run_of_the_groups_steps(tmp_path):
    run_dir = tmp_path / "run"
    result = train(*PPO, *RAY, "--learners", "2", "--total-steps", "512", "--run-dir", str(run_dir), timeout=180)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "learners started on Ray" in result.stderr
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["env_steps"] == 512
    assert [record["env_steps"] for record in records(run_dir)] == [128 * i for i in range(1, 5)]
    assert "learner_placement: ray" in (run_dir / "config.yaml").read_text()


def test_a_learner_whose_actor_is_killed_ends_the_run_naming_it(tmp_path):
    run = Supervised(tmp_path, *LONG, *RAY, "--learners", "2")
    try:
        pids = run.learner_pids(deadline_s=120)
        run.wait_for_checkpoint()
        os.kill(pids[1], signal.SIGKILL)
        code, _ = run.wait(deadline_s=90)
    finally:
        run.close()
    err = run.stderr()
    assert code == 1, err[-3000:]
    message = [line for line in err.splitlines() if line.startswith("relayrl: error:")]
    assert len(message) == 1 and f"learner 1 of 2 (pid {pids[1]}) died" in message[0], err[-3000:]
    assert "Traceback" not in err
    assert (run.run_dir / "checkpoints" / "last.safetensors").is_file()
