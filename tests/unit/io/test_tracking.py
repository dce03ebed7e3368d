"""Weights & Biases as a metrics sink (relayrl train --track, logging.wandb), tested offline.

An offline W&B run is a file of protobuf records (``run-<id>.wandb``, LevelDB's log layout); ``wandb_run``
reads it back, so the tests see what `wandb sync` would upload: the config, every history row, the summary
and the exit code.
"""

from __future__ import annotations

import json
import struct
import sys
import time
from pathlib import Path

import pytest
import yaml

from relayrl.errors import ConfigError
from relayrl.io.metrics import WANDB_ID_FILE, MetricsLogger, read_metrics
from relayrl.options import WandbConfig

TINY = ["--set", "env.num_envs=2", "--set", "ppo.num_steps=16", "--set", "ppo.batch_size=16",
        "--set", "ppo.epochs=1", "--set", "eval.episodes=2", "--set", "eval.freq=64", "--quiet"]


def wandb_records(path: Path):
    """The records of an offline run file: a 7-byte header, then 32 KiB blocks of chunks, each with a
    7-byte header (crc32, length, type: 1 full, 2 first, 3 middle, 4 last)."""
    from wandb.proto import wandb_internal_pb2 as pb

    data, block = path.read_bytes(), 32768
    assert data[:4] == b":W&B"[:len(data[:4])], data[:7]  # (shorter while the service has not flushed yet)
    pos, buf = 7, b""
    while pos + 7 <= len(data):
        if block - pos % block < 7:  # a block's tail too short for a chunk header is padding
            pos += block - pos % block
            continue
        _, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        if (kind == 0 and length == 0) or pos + 7 + length > len(data):  # the end, or a chunk not all written yet
            break
        chunk, pos = data[pos + 7:pos + 7 + length], pos + 7 + length
        buf = chunk if kind in (1, 2) else buf + chunk
        if kind in (1, 4):
            record = pb.Record()
            record.ParseFromString(buf)
            yield record


def wandb_run(root: Path, timeout: float = 30.0) -> dict:
    """The one offline W&B run under ``root``: run (project, group, tags, name, id), config, history, summary,
    exit_code, step_metrics. wandb's service may write the file a few seconds after ``finish`` returned:
    ``teardown`` stops the service of this process (the next ``wandb.init`` starts another), which writes it."""
    if sys.modules.get("wandb") is not None:
        sys.modules["wandb"].teardown()
    (path,) = root.glob("**/offline-run-*/run-*.wandb")
    deadline = time.monotonic() + timeout
    while True:
        records = list(wandb_records(path))
        if any(r.WhichOneof("record_type") == "exit" for r in records) or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    out: dict = {"config": {}, "history": [], "summary": {}, "exit_code": None, "step_metrics": {}}
    for record in records:
        kind = record.WhichOneof("record_type")
        if kind == "run":
            run = record.run
            out["run"] = {"project": run.project, "group": run.run_group, "tags": list(run.tags),
                          "name": run.display_name, "id": run.run_id}
            out["config"].update({i.key: json.loads(i.value_json) for i in run.config.update})
        elif kind == "config":
            out["config"].update({i.key: json.loads(i.value_json) for i in record.config.update})
        elif kind == "history":
            out["history"].append({i.key or "/".join(i.nested_key): json.loads(i.value_json)
                                   for i in record.history.item})
        elif kind == "summary":
            out["summary"].update({i.key or "/".join(i.nested_key): json.loads(i.value_json)
                                   for i in record.summary.update})
        elif kind == "metric":
            out["step_metrics"][record.metric.glob_name or record.metric.name] = record.metric.step_metric
        elif kind == "exit":
            out["exit_code"] = record.exit.exit_code
    out["config"].pop("_wandb", None)
    return out


@pytest.fixture
def wandb_home(tmp_path, monkeypatch):
    """W&B's own settings and caches inside tmp_path, and no W&B variables from the caller's shell."""
    for name in ("WANDB_MODE", "WANDB_DIR", "WANDB_PROJECT", "WANDB_ENTITY", "WANDB_RUN_GROUP", "WANDB_TAGS"):
        monkeypatch.delenv(name, raising=False)
    for name in ("WANDB_CONFIG_DIR", "WANDB_CACHE_DIR", "WANDB_DATA_DIR"):
        monkeypatch.setenv(name, str(tmp_path / "wandb-home" / name.lower()))
    monkeypatch.setenv("WANDB_SILENT", "true")
    return tmp_path


def test_metrics_config_and_summary_reach_an_offline_wandb_run(wandb_home):
    import wandb

    run_dir = wandb_home / "run"
    run_dir.mkdir()
    settings = WandbConfig(enabled=True, mode="offline", project="relayrl-tests", group="seeds", tags=["a", "b"])
    logger = MetricsLogger(run_dir, tensorboard=False, wandb=settings, run_config={"algo": "ppo", "ppo": {"epochs": 3}})
    logger.log("train", 100, 1.0, {"train/loss": 0.25, "train/nan": float("nan"), "flag": True})
    logger.log("eval", 200, 2.0, {"eval/return_mean": 21.5})
    logger.close({"best_eval_return": 21.5, "stop_reason": "total_steps"})
    assert wandb.run is None  # finished, and never wandb's global run

    run = wandb_run(run_dir / "wandb")  # no WANDB_DIR: the W&B files stay in the run directory
    assert run["run"] == {"project": "relayrl-tests", "group": "seeds", "tags": ["a", "b"], "name": "run",
                          "id": (run_dir / WANDB_ID_FILE).read_text().strip()}
    assert run["config"] == {"algo": "ppo", "ppo": {"epochs": 3}}
    rows = [{k: v for k, v in row.items() if not k.startswith("_")} for row in run["history"]]
    assert rows == [{"env_steps": 100, "wall_time_s": 1.0, "train/loss": 0.25},  # non-finite and bools left out
                    {"env_steps": 200, "wall_time_s": 2.0, "eval/return_mean": 21.5}]
    assert run["step_metrics"]["*"] == "env_steps"  # every chart against env steps, as TensorBoard's
    assert run["summary"]["best_eval_return"] == 21.5 and run["summary"]["stop_reason"] == "total_steps"
    assert run["exit_code"] == 0
    assert [e["event"] for e in read_metrics(run_dir)] == ["train", "eval"]  # the JSONL sink as before


def test_track_mirrors_the_run_config_metrics_and_summary(wandb_home, monkeypatch, run_cli):
    run_dir, wandb_dir = wandb_home / "run", wandb_home / "wb"
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(wandb_dir))
    assert run_cli(["train", "ppo", "--env", "CartPole-v1", "--total-steps", "128", "--run-dir", str(run_dir),
                    "--track", "--set", "logging.wandb.group=g", *TINY]) == 0
    run = wandb_run(wandb_dir)
    assert not (run_dir / "wandb").exists()  # WANDB_DIR wins
    assert run["run"]["project"] == "relayrl" and run["run"]["group"] == "g" and run["run"]["name"] == "run"

    saved = yaml.safe_load((run_dir / "config.yaml").read_text())
    assert run["config"] == saved  # the resolved config, as config.yaml has it
    assert saved["logging"]["wandb"]["enabled"] is True

    events = read_metrics(run_dir)
    rows = run["history"]
    assert len(rows) == len(events)  # every event of metrics.jsonl, one history row each
    for event, row in zip(events, rows):
        for key, value in event.items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                assert row[key] == pytest.approx(value), key
    evals = [(row["env_steps"], row["eval/return_mean"]) for row in rows if "eval/return_mean" in row]
    assert evals == [(e["env_steps"], pytest.approx(e["eval/return_mean"])) for e in events if e["event"] == "eval"]
    assert len(evals) == 2  # the learning curve: eval every 64 of 128 steps

    summary = json.loads((run_dir / "summary.json").read_text())
    for key, value in summary.items():
        assert run["summary"][key] == (pytest.approx(value) if isinstance(value, float) else value), key
    assert run["exit_code"] == 0


def test_a_run_that_fails_still_finishes_its_wandb_run(wandb_home, tiny_config):
    import wandb

    from relayrl import launch

    def boom(ctx):
        raise RuntimeError("the env broke")

    config = tiny_config("logging.wandb.enabled=true", "logging.wandb.mode=offline")
    with pytest.raises(RuntimeError, match="the env broke"):
        launch.run(config, run_dir=wandb_home / "run", hooks=[("after_iter", boom, {})])
    assert wandb.run is None
    run = wandb_run(wandb_home / "run" / "wandb")
    assert run["exit_code"] == 1  # failed on W&B
    assert run["summary"]["stop_reason"] == "error"
    assert any("train/loss/policy" in row for row in run["history"])  # what was logged before the error


def test_resume_continues_the_same_wandb_run(wandb_home):
    run_dir = wandb_home / "run"
    run_dir.mkdir()
    settings = WandbConfig(enabled=True, mode="offline")
    for resume, steps in ((False, 100), (True, 200)):
        logger = MetricsLogger(run_dir, tensorboard=False, wandb=settings, resume=resume)
        logger.log("train", steps, 1.0, {"train/loss": 0.5})
        logger.close()
    run_id = (run_dir / WANDB_ID_FILE).read_text().strip()
    segments = list((run_dir / "wandb").glob("offline-run-*/run-*.wandb"))
    # two offline segments of one W&B run, which `wandb sync` joins
    assert len(segments) == 2 and {path.stem.partition("-")[2] for path in segments} == {run_id}


@pytest.mark.parametrize("existing", [False, True])
def test_a_wandb_run_that_cannot_start_leaves_no_run_behind(wandb_home, monkeypatch, capsys, run_cli, existing):
    """Online W&B without a login refuses to start: exit 2, and the run folder is as it was (gone, or
    empty if it was an empty folder given to --run-dir), not a config.yaml without a run."""
    monkeypatch.setenv("HOME", str(wandb_home / "home"))  # no ~/.netrc key
    monkeypatch.setenv("WANDB_API_KEY", "")
    run_dir = wandb_home / "run"
    if existing:
        run_dir.mkdir()
    code = run_cli(["train", "ppo", "--env", "CartPole-v1", "--total-steps", "64", "--run-dir", str(run_dir),
                    "--track", "--set", "logging.wandb.mode=online", *TINY])
    err = capsys.readouterr().err
    assert code == 2 and "W&B could not start a run (mode online)" in err, err
    if existing:
        assert sorted(p.name for p in run_dir.iterdir()) == []
    else:
        assert not run_dir.exists()


# ---------------------------------------------------------------- without the package


@pytest.fixture
def no_wandb(monkeypatch, tmp_path):
    """As if wandb were not installed; the working directory is tmp_path (where runs/ would appear)."""
    for name in [n for n in sys.modules if n == "wandb" or n.startswith("wandb.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "wandb", None)  # `import wandb` now raises ImportError
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.parametrize("how", ["flag", "a project in a config file"])
def test_track_without_wandb_exits_2_naming_the_extra_and_writes_nothing(no_wandb, capsys, how, run_cli):
    args = ["train", "ppo", "--env", "CartPole-v1", "--total-steps", "64", "--quiet"]
    if how == "flag":
        args.append("--track")
    else:
        (no_wandb / "track.yaml").write_text("logging:\n  wandb:\n    project: mine\n")  # (enabled: null)
        args += ["--config", "track.yaml"]
    assert run_cli(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "needs the wandb package" in err[0]
    assert "python -m pip install -c constraints.txt -e '.[wandb]'" in err[0] and "'relayrl[" not in err[0]
    assert sorted(p.name for p in no_wandb.iterdir()) == (["track.yaml"] if how != "flag" else [])


def test_library_train_without_wandb_refuses_before_the_run_directory(no_wandb):
    import relayrl

    with pytest.raises(ConfigError, match=r"-e '\.\[wandb\]'"):
        relayrl.train("ppo", "CartPole-v1", {"logging": {"wandb": {"enabled": True}}}, run_dir=no_wandb / "run",
                      total_steps=64)
    assert not (no_wandb / "run").exists()


@pytest.mark.parametrize("sets", [["logging.wandb.enabled=true", "logging.wandb.mode=disabled"],
                                  ["logging.wandb.project=mine", "logging.wandb.enabled=false"], []])
def test_a_wandb_section_that_is_off_needs_no_package(no_wandb, tiny_config, sets):
    from relayrl import launch

    config = tiny_config(*sets, "eval.freq=0", total_steps=32)
    summary = launch.run(config, run_dir=no_wandb / "run")
    assert summary["env_steps"] == 32 and not (no_wandb / "run" / WANDB_ID_FILE).exists()
