"""An expert worker (``relayrl worker --policy module:function``) feeds a trainer through a real relay: real
processes on loopback; the trainer learns from the scripted policy's transitions, the worker never takes
weights."""

from __future__ import annotations

import json
import re

from relay_procs import finish, free_port, output, relayrl, stop, tails, wait_listening


def test_a_scripted_expert_worker_feeds_a_sac_trainer_through_the_relay(tmp_path):
    address = f"127.0.0.1:{free_port()}"
    relay = relayrl("serve", "--bind", address, "--heartbeat", "0.1")
    trainer = worker = None
    try:
        wait_listening(relay)
        run = tmp_path / "run"
        trainer = relayrl("train", "sac", "--env", "Pendulum-v1", "--server", address, "--total-steps", "1000",
                          "--set", "sac.start_training=200", "--set", "eval.episodes=1", "--run-dir", str(run),
                          "--quiet", "--no-tensorboard", cwd=tmp_path)
        worker = relayrl("worker", "--server", address, "--env", "Pendulum-v1", "--max-steps", "1500",
                         "--policy", "relayrl.testing.scripted:pendulum_swing", "--name", "expert", cwd=tmp_path)
        finish(trainer, timeout=120)
        assert trainer.returncode == 0, tails(trainer, worker, relay)
        summary = json.loads((run / "summary.json").read_text())
        assert summary["env_steps"] >= 1000 and summary["updates"] > 0
        finish(worker, timeout=60)
        text = output(worker)
        assert worker.returncode == 0 and "Traceback" not in text, tails(worker)
        assert "policy version 0" in text  # the expert never took the trainer's weights
        acked = re.search(r"worker done: \d+ env steps, \d+ chunks sent, (\d+) acknowledged", text)
        assert acked and int(acked.group(1)) > 0, text
    finally:
        stop(*(p for p in (worker, trainer, relay) if p is not None))
