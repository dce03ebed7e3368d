"""The example algorithm of examples/reinforce.py, written only against relayrl's contracts, trains like
the built-ins from the command line: `relayrl train examples.reinforce:reinforce` on the inline, mp and
Ray backends, with every process importing the module by name (docs/library.md, "Your own algorithm")."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
REF = "examples.reinforce:reinforce"
QUIET = ["--quiet", "--no-tensorboard"]


def relayrl(*args, cwd, pythonpath=True, timeout=300):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if pythonpath:
        env["PYTHONPATH"] = str(ROOT)  # the learner, its mp fork server and Ray's workers all inherit it
    return subprocess.run([sys.executable, "-m", "relayrl", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, env=env, timeout=timeout)


def ok(result):
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Traceback" not in result.stderr
    return result.stdout


def summary(run_dir: Path) -> dict:
    return json.loads((run_dir / "summary.json").read_text())


def test_the_example_learns_cartpole_on_two_mp_workers(tmp_path):
    run_dir = tmp_path / "run"
    ok(relayrl("train", REF, "--env", "CartPole-v1", "--backend", "mp", "--workers", 2, "--total-steps", 40_000,
               "--stop-value", 150, "--set", "env.num_envs=4", "--set", "eval.freq=4096", "--set", "eval.episodes=5",
               "--set", "eval.num_envs=5", "--run-dir", run_dir, *QUIET, cwd=tmp_path))
    result = summary(run_dir)
    assert result["algo"] == REF and result["backend"] == "mp"
    assert result["best_eval_return"] > 100, result  # a random policy averages ~22
    saved = yaml.safe_load((run_dir / "config.yaml").read_text())
    assert saved["algo"] == REF and saved["workers"] == 2 and "reinforce" in saved
    out = ok(relayrl("eval", run_dir, "--episodes", 3, cwd=tmp_path))  # the checkpoint names the algorithm
    assert "CartPole-v1: return" in out and "over 3 episodes" in out


def test_config_prints_yaml_that_train_accepts_back_and_a_run_resumes_inline(tmp_path):
    out = ok(relayrl("config", REF, cwd=tmp_path))
    data = yaml.safe_load(out)
    assert data["algo"] == REF and data["reinforce"]["num_steps"] == 64 and "ppo" not in data
    assert "# Adam learning rate of the policy and the baseline." in out  # field docstrings as comments
    (tmp_path / "reinforce.yaml").write_text(out)
    run_dir = tmp_path / "run"
    tiny = ["--set", "env.num_envs=2", "--set", "reinforce.num_steps=32", "--set", "eval.freq=0",
            "--set", "eval.episodes=2", "--set", "eval.num_envs=2"]
    ok(relayrl("train", REF, "--config", tmp_path / "reinforce.yaml", "--set", "reinforce.lr=0.002",
               "--backend", "inline", "--total-steps", 256, "--run-dir", run_dir, *tiny, *QUIET, cwd=tmp_path))
    assert summary(run_dir)["env_steps"] == 256 and summary(run_dir)["backend"] == "inline"
    assert yaml.safe_load((run_dir / "config.yaml").read_text())["reinforce"]["lr"] == 0.002
    ok(relayrl("train", REF, "--resume", run_dir, "--total-steps", 512, *QUIET, cwd=tmp_path))
    assert summary(run_dir)["env_steps"] == 512 and summary(run_dir)["updates"] == 8


@pytest.mark.ray
def test_the_example_trains_on_ray_workers_that_import_it_from_the_drivers_directory(tmp_path):
    pytest.importorskip("ray")
    run_dir = tmp_path / "run"
    # no PYTHONPATH: `python -m relayrl` puts the working directory on the learner's path, and Ray puts the
    # driver's working directory on its workers' paths (the node proxy, then the mp workers it forks)
    ok(relayrl("train", REF, "--env", "CartPole-v1", "--backend", "ray", "--workers", 1, "--total-steps", 512,
               "--set", "env.num_envs=2", "--set", "reinforce.num_steps=32", "--set", "eval.freq=0",
               "--set", "eval.episodes=2", "--set", "eval.num_envs=2", "--run-dir", run_dir, *QUIET,
               cwd=ROOT, pythonpath=False))
    assert summary(run_dir)["backend"] == "ray" and summary(run_dir)["env_steps"] == 512


BROKEN_MODULE = """
from examples.reinforce import ReinforceConfig, ReinforcePolicy
from relayrl.algos import register
from relayrl.core import Algorithm


class Forgetful(Algorithm):  # no learn
    def __init__(self, cfg, obs_space, act_space, num_envs): ...
    def state_dict(self): return {}
    def load_state_dict(self, state): ...


register("forgetful", ReinforceConfig, Forgetful, ReinforcePolicy, on_policy=True)
"""


@pytest.mark.parametrize("ref, expected", [
    ("nowhere.algo:reinforce", "cannot import module 'nowhere.algo' (ModuleNotFoundError: No module named "
                               "'nowhere')"),
    ("examples.reinforce:a2c", "module 'examples.reinforce' does not register 'a2c' (it registers 'reinforce')"),
    ("forgetful_algo:forgetful", "the algorithm class forgetful_algo.Forgetful does not define learn"),
])
def test_a_reference_that_does_not_resolve_exits_2_with_one_line_and_writes_nothing(tmp_path, ref, expected):
    (tmp_path / "forgetful_algo.py").write_text(BROKEN_MODULE)
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{tmp_path}"}
    for args in (["train", ref, "--env", "CartPole-v1", "--backend", "mp", "--workers", 2, "--run-dir",
                  tmp_path / "run"], ["config", ref]):
        result = subprocess.run([sys.executable, "-m", "relayrl", *map(str, args)], capture_output=True, text=True,
                                cwd=tmp_path, env=env, timeout=120)
        assert result.returncode == 2, result.stderr
        assert result.stderr.count("\n") == 1 and result.stderr.startswith("relayrl: error: algorithm ")
        assert expected in result.stderr and result.stdout == ""
        assert not (tmp_path / "run").exists() and not (tmp_path / "runs").exists()
