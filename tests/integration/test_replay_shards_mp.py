"""The replay service on the mp backend: shard processes that real worker processes insert into."""

import logging
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np

from relayrl.config import build_config
from relayrl.io.metrics import read_metrics
from relayrl.runtime import make_pool
from relayrl.runtime.messages import InsertTransitions
from relayrl.training.trainer import run_trainer


def _children_of(pid):
    """Every live descendant of ``pid`` (from /proc)."""
    parents = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parents[int(entry.name)] = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError):
                continue
    found, frontier = set(), {pid}
    while frontier:
        frontier = {p for p, pp in parents.items() if pp in frontier} - found
        found |= frontier
    return found


def _gone(pids, seconds=10.0):
    deadline = time.monotonic() + seconds
    left = set(pids)
    while left and time.monotonic() < deadline:
        for pid in list(left):
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                left.discard(pid)
        time.sleep(0.05)
    return not left


def test_dqn_on_mp_workers_and_two_shard_processes_survives_a_killed_shard_and_a_bad_chunk(tmp_path, caplog):
    """One run for the whole path (processes are what costs time): workers insert into both shards and
    the learner samples from them; shard 1 is SIGKILLed mid-run, restarted and counted, and training
    goes on into the new process; a chunk of the wrong schema (written to shard 0's channel as a worker
    would) is refused and counted, with one warning for two such chunks; close() leaves no process."""
    config = build_config("dqn", None, ["env.num_envs=2", "dqn.start_training=500", "dqn.hidden_sizes=[32]",
                                        "backend=mp", "workers=2", "dqn.replay_shards=2", "eval.freq=0",
                                        "eval.episodes=2", "eval.num_envs=2"], {"total_steps": 40_000, "seed": 0})
    pool = make_pool(config)
    backend = pool.backend
    stop = threading.Event()
    pids: set[int] = set()
    seen: dict = {}

    def drive(ctx):
        pids.update(backend.pids().values(), backend.shard_pids().values())
        if "killed_at" not in seen and ctx.updates > 0:
            seen["killed_at"], seen["victim"] = ctx.env_steps, backend.shard_pids()[1]
            os.kill(seen["victim"], signal.SIGKILL)
            bad = InsertTransitions(0, 99, 0, {"obs": np.zeros((3, 2), np.float64)}, 3)
            for _ in range(2):
                assert backend.service.shards.channels[0].put(bad, timeout=10.0)
        elif "killed_at" in seen:
            stats = backend.service.stats()
            if ctx.env_steps >= seen["killed_at"] + 1000 and stats["replay/shard1_size"] > 0 \
                    and stats["replay/refused_chunks"] >= 2:
                seen["stats"], seen["updates"] = stats, ctx.updates
                shards = backend.service.shards
                beat = shards.call(1, "heartbeat")  # the new process's own counters
                assert shards.ready([beat], 10.0)
                seen["new_shard_inserted"] = shards.get(beat).counters["inserted"]
                stop.set()

    with caplog.at_level(logging.WARNING, logger="relayrl"):
        try:
            summary = run_trainer(config, run_dir=tmp_path / "run", tensorboard=False, samples=pool,
                                  hooks=[("after_iter", drive, {})], stop_event=stop)
        finally:
            pool.close()
    assert summary["stop_reason"] == "interrupted", summary  # every condition above was met
    stats = seen["stats"]
    assert stats["replay/shard_restarts"] >= 1 and backend.shard_pids() == {}
    assert stats["replay/shard0_size"] > 0 and stats["replay/shard1_size"] > 0 and stats["replay/inserted"] > 0
    assert seen["new_shard_inserted"] > 0  # the workers' inserts reached the restarted process
    assert stats["replay/refused_chunks"] == 2
    refusals = [r for r in caplog.records if "refused chunk" in r.getMessage()]
    assert len(refusals) == 1 and "columns differ" in refusals[0].getMessage()
    assert seen["updates"] > 0 and summary["env_steps"] >= seen["killed_at"] + 1000
    rows = [r for r in read_metrics(tmp_path / "run") if "train/replay/sampled" in r]
    assert rows and rows[-1]["train/replay/sampled"] > 0
    assert seen["victim"] in pids and len(pids) >= 5  # 2 workers, 2 shards, the restarted shard
    assert _gone(pids), "worker or shard processes outlived close()"


def test_ctrl_c_with_shards_snapshots_them_and_leaves_no_process(tmp_path):
    """From the CLI: checkpoints carry a snapshot per shard, and Ctrl-C (SIGINT to the process group,
    as a terminal sends it) ends the run with exit code 130 and takes every worker and shard with it."""
    run_dir = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-m", "relayrl", "train", "dqn", "--env", "CartPole-v1", "--workers", "2",
                             "--quiet", "--no-tensorboard", "--run-dir", str(run_dir), "--total-steps", "10000000",
                             "--set", "dqn.replay_shards=2", "--set", "dqn.start_training=200", "--set",
                             "dqn.hidden_sizes=[32]", "--set", "eval.freq=400", "--set", "eval.episodes=1", "--set",
                             "eval.num_envs=1"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    checkpoint = run_dir / "checkpoints" / "last.json"
    deadline = time.monotonic() + 90
    while not checkpoint.exists() and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.1)
    assert checkpoint.exists(), proc.communicate(timeout=30)[1][-2000:]
    snapshots = {p.name for p in (run_dir / "checkpoints").rglob("replay_shard*.safetensors")}
    assert snapshots == {"replay_shard0.safetensors", "replay_shard1.safetensors"}, snapshots
    children = _children_of(proc.pid)
    assert len(children) >= 5  # the fork server, 2 workers, 2 shards
    os.killpg(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err[-2000:]
    assert "Traceback" not in err
    assert _gone(children), "worker or shard processes outlived Ctrl-C"
