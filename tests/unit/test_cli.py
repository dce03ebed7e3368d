"""The command line as a user meets it: exit codes and one-line messages, no tracebacks."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest
import yaml

from relayrl.cli import main

TINY = ["--set", "env.num_envs=2", "--set", "ppo.num_steps=16", "--set", "ppo.batch_size=16",
        "--set", "ppo.epochs=1", "--set", "eval.episodes=2", "--set", "eval.freq=64", "--quiet"]


def relayrl(*args, cwd=None, timeout=120):
    return subprocess.run([sys.executable, "-m", "relayrl", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, timeout=timeout)


@pytest.mark.parametrize("args, expected", [
    (["train", "ppo", "--env", "CartPole-v1", "--set", "ppo.lerning_rate=3"], "did you mean 'ppo.actor_lr' or 'ppo.critic_lr'"),
    (["train", "ppo", "--env", "CartPole-v1", "--set", "ppo.epochs=many"], "ppo.epochs"),
    (["train", "ppo", "--set", "learning_rate=3e-4"], "did you mean 'ppo.actor_lr' or 'ppo.critic_lr'"),
    (["train", "sac", "--set", "batch_size=64"], "did you mean 'sac.batch_size'"),
    (["train", "ppo", "--env", "CartPole-v1", "--set", "env.num_envs=0"], "greater than or equal to 1"),
    (["train", "ppo", "--env", "CartPol-v1", "--quiet"], "did you mean 'CartPole-v1'"),
    (["train", "ppx", "--env", "CartPole-v1"], "unknown algorithm 'ppx'"),
    (["train", "ppo", "--config", "nope.yaml"], "config file 'nope.yaml' not found"),
    (["eval", "no/such/run"], "run directory or checkpoint 'no/such/run' not found"),
    (["train", "--resume", "no/such/run"], "--resume 'no/such/run': no such run directory"),
    (["train", "--env", "CartPole-v1"], "relayrl train needs ALGO"),
    (["train", "ppo", "--env", "CartPole-v1", "--train-iter", "0"], "'train_iter' = 0: Input should be greater than or equal to 1"),
    (["train", "dqn", "--env", "CartPole-v1", "--time-limit", "-5"], "'time_limit_s' = -5.0: Input should be greater than 0"),
])
def test_user_mistakes_exit_2_with_one_clear_line(args, expected, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # the CLI's entry point in this process (a process each costs ~3 s of imports)
    code = main(args)
    err = capsys.readouterr().err
    assert code == 2, err
    assert expected in err
    assert "Traceback" not in err
    assert len(err.strip().splitlines()) == 1
    assert not (tmp_path / "runs").exists()  # nothing half-written


def test_a_mistake_exits_2_from_the_command_itself(tmp_path):
    result = relayrl("train", "ppo", "--env", "CartPole-v1", "--set", "ppo.lerning_rate=3", cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert "did you mean 'ppo.actor_lr'" in result.stderr and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_config_prints_yaml_that_train_accepts_back(tmp_path):
    result = relayrl("config", "ppo")
    assert result.returncode == 0
    data = yaml.safe_load(result.stdout)
    assert data["algo"] == "ppo" and data["env"]["id"] == "CartPole-v1"
    path = tmp_path / "ppo.yaml"
    path.write_text(result.stdout)
    run = relayrl("train", "ppo", "--config", path, "--total-steps", 64, "--run-dir", tmp_path / "run", *TINY)
    assert run.returncode == 0, run.stderr
    saved = yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())
    assert saved["total_steps"] == 64 and saved["env"]["num_envs"] == 2


def test_train_eval_plot_end_to_end(tmp_path):
    run_dir = tmp_path / "run"
    train = relayrl("train", "ppo", "--env", "CartPole-v1", "--total-steps", 256, "--seed", 3,
                    "--run-dir", run_dir, *TINY)
    assert train.returncode == 0, train.stderr
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["env_steps"] == 256 and summary["seed"] == 3 and summary["stop_value"] == 475.0
    assert list(run_dir.glob("events.out.tfevents.*"))
    record = (run_dir / "experiment.txt").read_text()  # the human-readable experiment record
    assert "command: relayrl train ppo --env CartPole-v1 --total-steps 256 --seed 3" in record
    assert "seed: 0 -> 3" in record and "total_steps:" in record
    headless = {k: v for k, v in os.environ.items() if k not in ("XDG_RUNTIME_DIR", "SDL_VIDEODRIVER", "DISPLAY")}
    ev = subprocess.run([sys.executable, "-m", "relayrl", "eval", str(run_dir), "--episodes", "3", "--render",
                         str(tmp_path / "ep.gif")], capture_output=True, text=True, timeout=120, env=headless)
    assert ev.returncode == 0, ev.stderr
    assert ev.stderr == ""  # no "XDG_RUNTIME_DIR is invalid" from SDL on a machine without a display
    assert "return" in ev.stdout and "±" in ev.stdout and "over 3 episodes" in ev.stdout
    assert (tmp_path / "ep.gif").read_bytes()[:6] in (b"GIF87a", b"GIF89a")
    plot = relayrl("plot", run_dir, "-o", tmp_path / "curve.png")
    assert plot.returncode == 0, plot.stderr
    assert (tmp_path / "curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_ctrl_c_saves_last_checkpoint_and_summary_exit_130(tmp_path):
    run_dir = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-m", "relayrl", "train", "ppo", "--env", "CartPole-v1",
                             "--total-steps", "10000000", "--run-dir", str(run_dir), *TINY],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    metrics = run_dir / "metrics.jsonl"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not (metrics.exists() and metrics.read_text().count("\n") >= 3):
        time.sleep(0.1)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["stop_reason"] == "interrupted" and summary["env_steps"] > 0
    last = json.loads((run_dir / "checkpoints" / "last.json").read_text())
    assert last["run"]["env_steps"] == summary["env_steps"]
    assert "Traceback" not in err


def test_resume_continues_counters_and_reports_changes(tmp_path):
    run_dir = tmp_path / "run"
    first = relayrl("train", "ppo", "--total-steps", 128, "--run-dir", run_dir, *TINY)
    assert first.returncode == 0, first.stderr
    before = json.loads((run_dir / "summary.json").read_text())
    second = relayrl("train", "ppo", "--resume", run_dir, "--total-steps", 256, "--set", "ppo.epochs=2", "--quiet")
    assert second.returncode == 0, second.stderr
    assert "changed option: ppo.epochs: 1 -> 2" in second.stderr
    assert "total_steps: 128 -> 256" in second.stderr
    after = json.loads((run_dir / "summary.json").read_text())
    assert after["env_steps"] == 256 and after["updates"] > before["updates"]
    steps = [json.loads(line)["env_steps"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()
             if json.loads(line)["event"] == "train"]
    assert steps == sorted(steps) and steps[-1] == 256 and steps[0] == 32
    wall = [json.loads(line)["wall_time_s"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert wall == sorted(wall)  # the clock continues from the first session


def test_previous_starts_a_new_run_from_weights(tmp_path):
    from relayrl.io.checkpoint import load_checkpoint

    first = relayrl("train", "ppo", "--total-steps", 128, "--run-dir", tmp_path / "a", *TINY)
    assert first.returncode == 0, first.stderr
    previous = tmp_path / "a" / "checkpoints" / "last.safetensors"
    # learning rates of 1e-12 keep the second run's weights where they started, so its checkpoint shows them
    frozen = ["--set", "ppo.actor_lr=1e-12", "--set", "ppo.critic_lr=1e-12"]
    second = relayrl("train", "ppo", "--previous", previous, "--total-steps", 64, "--run-dir", tmp_path / "b",
                     *TINY, *frozen)
    assert second.returncode == 0, second.stderr
    trained = load_checkpoint(previous).state["algo"]["model"]
    started = load_checkpoint(tmp_path / "b" / "checkpoints" / "last.safetensors").state["algo"]["model"]
    assert set(started) == set(trained) and len(trained) >= 4
    for key, weights in trained.items():  # not the seed's initial weights: the first run trained them
        assert (started[key] - weights).abs().max().item() < 1e-6, key
    summary = json.loads((tmp_path / "b" / "summary.json").read_text())
    assert summary["env_steps"] == 64  # a new run: its own counters, not the first run's
    wrong_env = relayrl("train", "ppo", "--env", "Acrobot-v1", "--previous", tmp_path / "a",
                        "--total-steps", 64, "--run-dir", tmp_path / "c", *TINY)
    assert wrong_env.returncode == 2 and "does not fit" in wrong_env.stderr
    assert not (tmp_path / "c").exists()  # a refused start writes no run directory


def test_corrupt_checkpoint_is_reported_not_crashed(tmp_path):
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(os.urandom(64))
    result = relayrl("eval", bad)
    assert result.returncode == 2 and "unreadable" in result.stderr and "Traceback" not in result.stderr


def test_version_and_help_speak_to_users():
    from relayrl import __version__

    version = relayrl("--version")
    assert version.returncode == 0 and version.stdout.strip() == f"relayrl {__version__}"
    top = relayrl("--help")
    assert top.returncode == 0 and "DESIGN.md" not in top.stdout and "exit codes: 0 done" in top.stdout
    train_help = relayrl("train", "--help").stdout
    assert all(name in train_help for name in ("ppo", "appo", "dqn", "sac", "crossq"))


def test_eval_on_an_env_of_other_spaces_names_the_shapes_that_differ(tmp_path, tiny_config):
    from relayrl import launch

    launch.run(tiny_config(total_steps=64), run_dir=tmp_path / "run", tensorboard=False)
    result = relayrl("eval", tmp_path / "run", "--env", "Acrobot-v1", "--episodes", 1)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    line = result.stderr.strip()
    assert len(line.splitlines()) == 1
    assert "(trained on CartPole-v1) does not fit Acrobot-v1's spaces" in line
    assert "actor.0.weight: [64, 4] in the checkpoint, [64, 6] here" in line  # 4 observations there, 6 here


def test_the_tensorboard_viewer_the_docs_name_is_an_extra():
    import re
    import tomllib
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    extras = tomllib.loads((root / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert any(dep.startswith("tensorboard") for dep in extras["tensorboard"])
    usage = (root / "docs" / "usage.md").read_text()
    for mention in re.findall(r".*tensorboard --logdir.*", usage):
        assert "[tensorboard]" in mention  # every "tensorboard --logdir" says how to install the viewer
    pins = (root / "constraints.txt").read_text()
    assert re.search(r"^tensorboard==", pins, re.M)


def files_of(folder):
    return {str(p.relative_to(folder)): (p.read_bytes(), p.stat().st_mtime_ns)
            for p in sorted(folder.rglob("*")) if p.is_file() and p.name != ".lock"}  # (the lock holds a pid)


def train_in_process(capsys, *args):
    code = main(["train", *map(str, args)])
    out, err = capsys.readouterr()
    return code, out, err


def test_a_second_train_into_a_used_run_dir_exits_2_and_changes_nothing(tmp_path, capsys):
    run_dir = tmp_path / "run"
    assert train_in_process(capsys, "ppo", "--env", "CartPole-v1", "--total-steps", 64, "--run-dir", run_dir,
                            *TINY)[0] == 0
    before = files_of(run_dir)
    code, out, err = train_in_process(capsys, "ppo", "--env", "CartPole-v1", "--total-steps", 64, "--run-dir",
                                      run_dir, *TINY)
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert f"run directory {str(run_dir)!r} is not empty" in err and f"--resume {run_dir}" in err
    assert "fresh directory" in err
    assert files_of(run_dir) == before  # the first run's metrics, checkpoints and summary untouched


def test_resume_reads_the_algorithm_from_the_run_and_refuses_another(tmp_path, capsys):
    run_dir = tmp_path / "run"
    assert train_in_process(capsys, "ppo", "--env", "CartPole-v1", "--total-steps", 64, "--run-dir", run_dir,
                            *TINY)[0] == 0
    before = files_of(run_dir)
    code, _, err = train_in_process(capsys, "dqn", "--resume", run_dir, "--total-steps", 128, "--quiet")
    assert code == 2 and f"--resume {str(run_dir)!r} is a ppo run, not dqn: drop ALGO" in err
    assert files_of(run_dir) == before
    code, out, err = train_in_process(capsys, "--resume", run_dir, "--total-steps", 128, "--quiet")
    assert code == 0, err
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["algo"] == "ppo" and summary["env_steps"] == 128


def test_resuming_a_complete_run_says_so_and_how_to_extend_it_and_writes_nothing(tmp_path, capsys):
    run_dir = tmp_path / "run"
    assert train_in_process(capsys, "ppo", "--env", "CartPole-v1", "--total-steps", 64, "--run-dir", run_dir,
                            *TINY)[0] == 0
    before = files_of(run_dir)
    code, out, err = train_in_process(capsys, "--resume", run_dir, "--quiet")
    assert code == 0, err  # resuming is idempotent: a retry loop around --resume ends once the run is done
    assert f"run {run_dir} is already complete, nothing to train" in err
    assert "reach total_steps 64" in err and "--total-steps" in err
    assert files_of(run_dir) == before  # no summary, experiment record or checkpoint rewritten


def test_a_yaml_syntax_error_names_the_file_and_line(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("ppo:\n  epochs: 3\n  gamma: [0.9\nenv:\n  id: CartPole-v1\n")
    code = main(["train", "ppo", "--config", str(bad), "--run-dir", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert f"config file {str(bad)!r} is not valid YAML: line 4, column 4:" in err
    assert "<unicode string>" not in err and not (tmp_path / "run").exists()
