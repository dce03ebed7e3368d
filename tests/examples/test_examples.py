"""Every documented example runs: the Python blocks of docs/library.md (in order, in one process) and each
script in examples/, on small budgets, in fresh processes as a user would run them."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]


def run(args, cwd, timeout=300):
    result = subprocess.run([sys.executable, *map(str, args)], capture_output=True, text=True, cwd=cwd,
                            timeout=timeout)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Traceback" not in result.stderr
    return result.stdout


GOES_ON = "# goes on from the quickstart"  # the first line of a block that uses the quickstart's `run`


def library_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", (ROOT / "docs" / "library.md").read_text(), re.S)


def eval_steps_of_each_run(runs: Path) -> dict[str, list[int]]:
    return {folder.name: [json.loads(line)["env_steps"] for line in (folder / "metrics.jsonl").read_text().splitlines()
                          if json.loads(line)["event"] == "eval"]
            for folder in runs.iterdir()}


def check_library_output(out: str) -> None:
    assert "return 500.0" in out  # the quickstart's CartPole policy, deployed with predict()
    assert "eval return" in out
    scripted = re.search(r"scripted: (\d+) env steps, (\d+) updates", out)
    assert int(scripted.group(1)) == 2048 and int(scripted.group(2)) > 0  # a SampleSource of your own taught DQN
    onnx, predicted = re.search(r"onnx actions \[([\d ]+)\] predict \[([\d ]+)\]", out).groups()
    assert onnx.split() == predicted.split() and len(onnx.split()) == 8  # the exported graph acts as predict
    keyed = re.search(r"id-keyed: (\d+) episodes, mean return ([\d.]+)", out)
    assert int(keyed.group(1)) == 8 and float(keyed.group(2)) > 100  # 4 envs x episode_num=2; the controller balances
    assert re.search(r"^8 whole episodes, returns \[", out, re.M)  # collect_episodes


def test_the_python_blocks_of_the_library_page_run_in_order_then_each_on_its_own_in_the_same_folder(tmp_path):
    blocks = library_blocks()
    assert len(blocks) >= 4 and any("onnxruntime" in block for block in blocks)
    script = tmp_path / "library_page.py"
    script.write_text("\n\n".join(blocks))
    check_library_output(run([script], tmp_path, timeout=600))
    runs_first = eval_steps_of_each_run(tmp_path / "runs")
    assert len(runs_first) >= 4 and all(runs_first.values())

    # a reader who runs one block again, or copies it alone: each runs in a fresh process, in the folder the
    # page just used (its fixed names, e.g. my_nets.py, still there); one that goes on from the quickstart
    # runs after it, as its first line says
    quickstart = blocks[0]
    outputs = []
    for k, block in enumerate(blocks):
        if block.startswith(GOES_ON):
            continue
        following = [b for b in blocks[k + 1:] if b.startswith(GOES_ON)] if block is quickstart else []
        alone = tmp_path / f"block_{k}.py"
        alone.write_text("\n\n".join([block, *following]))
        outputs.append(run([alone], tmp_path, timeout=600))
    check_library_output("\n".join(outputs))
    runs_both = eval_steps_of_each_run(tmp_path / "runs")
    assert len(runs_both) == 2 * len(runs_first)  # the second time, new run directories beside the first ones
    for name, steps in runs_both.items():
        assert steps == sorted(set(steps)), (name, steps)  # one run per directory: no run's rows mixed in
        if name in runs_first:
            assert steps == runs_first[name]


def test_quickstart_trains_loads_and_deploys(tmp_path):
    out = run([ROOT / "examples" / "quickstart.py", "--total-steps", 20_000, "--run-dir", tmp_path / "run"],
              tmp_path)
    assert "one deployed episode: return" in out and (tmp_path / "run" / "checkpoints" / "best.safetensors").is_file()


@pytest.mark.parametrize("workers", [1, 2])
def test_an_env_factory_trains_in_process_and_on_mp_workers(tmp_path, workers):
    out = run([ROOT / "examples" / "custom_env.py", "--total-steps", 12_000, "--workers", workers,
               "--run-dir", tmp_path / "run"], tmp_path)
    assert "examples.my_env:make_env: best eval return" in out and "(solved: True)" in out


def test_the_customised_main_loop_learns(tmp_path):
    out = run([ROOT / "examples" / "custom_loop.py", "--total-steps", 5_200], tmp_path)
    returns = [float(x) for x in re.findall(r"eval return ([-\d.]+)", out)]
    assert len(returns) == 1 and returns[0] > 30  # a random CartPole policy averages ~22


def test_predict_in_a_loop_returns_what_relayrl_eval_reports(tmp_path, tiny_config):
    import relayrl
    from relayrl.training.saved_policy import evaluate_checkpoint

    run_ = relayrl.train("ppo", "CartPole-v1", tiny_config(total_steps=2048), run_dir=tmp_path / "run",
                         tensorboard=False)
    episodes = 3
    reported = evaluate_checkpoint(run_.run_dir, episodes=episodes, seed=0)
    policy = relayrl.load(run_.run_dir)
    returns = []
    for k in range(episodes):  # the evaluator's env k starts from seed + k
        env = gym.make("CartPole-v1")
        obs, _ = env.reset(seed=k)
        total, done = 0.0, False
        while not done:
            obs, reward, terminated, truncated, _ = env.step(policy.predict(obs))
            total, done = total + reward, terminated or truncated
        returns.append(total)
    assert np.mean(returns) == pytest.approx(reported["return_mean"])
    assert np.std(returns) == pytest.approx(reported["return_std"])


def test_a_factory_defined_in_a_script_stays_in_process_and_says_so(tmp_path):
    import relayrl
    from relayrl.errors import ConfigError

    def make():  # not importable by other processes
        return gym.make("CartPole-v1")

    with pytest.raises(ConfigError, match="move it to the top of an importable module to use workers"):
        relayrl.train("ppo", make, workers=2, total_steps=64)
    run_ = relayrl.train("ppo", make, {"env": {"num_envs": 2}, "eval": {"episodes": 1}}, total_steps=64,
                         run_dir=tmp_path / "run", tensorboard=False)
    assert run_.summary["env_steps"] >= 64 and run_.summary["stop_reason"] == "total_steps"


@pytest.mark.parametrize("backend, workers", [("inline", 2), ("mp", 2)])
def test_your_own_network_trains_on_inline_and_mp_workers_and_loads_back(tmp_path, backend, workers):
    out = run([ROOT / "examples" / "my_network.py", "--total-steps", 12_000, "--backend", backend, "--workers",
               workers, "--run-dir", tmp_path / "run"], tmp_path)
    best = float(re.search(r"best eval return ([-\d.]+)", out).group(1))
    assert best > 30  # a random CartPole policy averages ~22
    assert "encoder: 'examples.my_network:build'" in (tmp_path / "run" / "config.yaml").read_text()
    assert "rebuilt network: LayerNormMLP" in out  # relayrl.load built the encoder from the checkpoint's reference
    assert re.search(r"one deployed episode: return [\d.]+", out)


def test_a_run_of_an_in_process_factory_says_why_another_process_cannot_build_its_env():
    from relayrl.envs.registry import make
    from relayrl.errors import EnvError

    with pytest.raises(EnvError, match="move the factory to the top of an importable module"):
        make("relayrl-factory/local.make-v0")
