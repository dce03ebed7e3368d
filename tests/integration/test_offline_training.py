"""Offline data end to end: a SAC run, `relayrl collect` from it, BC trained on the collected .npz (evaluated,
checkpointed, resumed, loaded, evaluated again) and IQL trained on the run's replay snapshot; no env steps."""

import json

import numpy as np

import relayrl
from relayrl.cli import main

SMALL = ["--quiet", "--no-tensorboard", "--set", "eval.episodes=1"]


def summary(run):
    return json.loads((run / "summary.json").read_text())


def test_collect_then_bc_and_iql_learn_offline_with_checkpoints_resume_and_eval(tmp_path, capsys):
    sac = tmp_path / "sac"
    assert main(["train", "sac", "--env", "Pendulum-v1", "--total-steps", "400", "--run-dir", str(sac), *SMALL,
                 "--set", "sac.start_training=200", "--set", "eval.freq=400"]) == 0
    data = tmp_path / "data.npz"
    assert main(["collect", str(sac), "--episodes", "2", "-o", str(data), "--stochastic"]) == 0
    assert "400 transitions of 2 episodes" in capsys.readouterr().out
    with np.load(data) as arrays:
        assert arrays["obs"].shape == (400, 3) and arrays["truncated"].sum() == 2 and arrays["action"].shape == (400, 1)
        assert np.abs(arrays["action"]).max() <= 2.0  # the env's actions, not the learner's [-1, 1]
    before = data.read_bytes()
    assert main(["collect", str(sac), "--episodes", "1", "-o", str(data)]) == 2  # never over a dataset
    assert data.read_bytes() == before

    bc = tmp_path / "bc"
    offline = ["--set", f"bc.dataset={data}", "--set", "bc.updates_per_round=50", "--set", "eval.freq=100"]
    assert main(["train", "bc", "--env", "Pendulum-v1", "--total-steps", "200", "--run-dir", str(bc), *SMALL,
                 *offline]) == 0
    first = summary(bc)
    assert first["updates"] == first["env_steps"] == 200 and first["last_eval_return"] is not None
    evals = [json.loads(line) for line in (bc / "metrics.jsonl").read_text().splitlines() if '"eval"' in line]
    assert [e["env_steps"] for e in evals] == [100, 200]  # eval.freq counts updates
    assert (bc / "checkpoints" / "best.safetensors").is_file() and not (bc / "checkpoints" / "replay.safetensors").exists()
    assert main(["train", "--resume", str(bc), "--total-steps", "300", *SMALL]) == 0
    assert summary(bc)["updates"] == 300
    action = relayrl.load(bc).predict(np.zeros(3, np.float32))
    assert action.shape == (1,) and -2 <= action[0] <= 2
    assert main(["eval", str(bc), "--episodes", "1"]) == 0

    iql = tmp_path / "iql"
    assert main(["train", "iql", "--env", "Pendulum-v1", "--total-steps", "100", "--run-dir", str(iql), *SMALL,
                 "--set", f"iql.dataset={sac}", "--set", "eval.freq=100"]) == 0  # the SAC run's replay
    assert summary(iql)["updates"] == 100
    last = [json.loads(line) for line in (iql / "metrics.jsonl").read_text().splitlines() if '"train"' in line][-1]
    assert last["offline/transitions"] == 400  # its whole replay
