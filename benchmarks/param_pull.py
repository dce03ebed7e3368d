"""Weights pushed to every worker against pulled at a period (net.param_pull_s, the actor model's FetchParam).

    python benchmarks/param_pull.py [--workers 3] [--steps 4000] [--period 1.0]

For each mode (push, pull) one run on this machine: a relay on loopback (a thread of this process), `relayrl train
sac --env Pendulum-v1 --server` (SAC publishes its actor after every update), and N `relayrl worker`s, the pulling
ones with `--set net.param_pull_s=PERIOD`. Prints per mode the weight messages the relay sent to workers, the bytes
it sent, and the trainer's mean worker lag (workers/lag_mean: versions behind the learner when a chunk arrives) and env
steps/s, as JSON lines.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from relayrl.testing.relay import running_relay


def _start(*args: str, log: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "relayrl", *args], stdout=log.open("w"), stderr=subprocess.STDOUT,
                            start_new_session=True)


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def run(mode: str, args: argparse.Namespace, folder: Path) -> dict:
    workers: list[subprocess.Popen] = []
    with running_relay(heartbeat_s=0.2, peer_timeout_s=10.0) as relay:  # (in this process's thread: its counters)
        run_dir = folder / f"run_{mode}"
        trainer = _start("train", "sac", "--env", "Pendulum-v1", "--server", relay.address, "--total-steps",
                         str(args.steps), "--run-dir", str(run_dir), "--quiet", "--no-tensorboard",
                         "--set", "eval.freq=0", "--set", "eval.episodes=1", "--set", "sac.start_training=500",
                         log=folder / f"trainer_{mode}.log")
        try:
            for k in range(args.workers):
                pull = ["--set", f"net.param_pull_s={args.period}"] if mode == "pull" else []
                workers.append(_start("worker", "--server", relay.address, "--env", "Pendulum-v1", "--algo", "sac",
                                      "--name", f"w{k}", "--set", f"net.weights_dir={folder / f'{mode}_w{k}'}", *pull,
                                      log=folder / f"worker_{mode}_{k}.log"))
            trainer.wait(timeout=900)
        finally:
            for proc in [*workers, trainer]:
                _stop(proc)
        sent = relay.stats()
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    lags = [r["workers/lag_mean"] for r in rows if "workers/lag_mean" in r]
    summary = json.loads((run_dir / "summary.json").read_text())
    return {"mode": mode, "workers": args.workers, "period_s": args.period if mode == "pull" else None,
            "versions": summary["updates"], "weights_out": sent["weights_out"], "bytes_out": sent["bytes_out"],
            "lag_mean": round(sum(lags) / len(lags), 1) if lags else None,
            "env_steps_per_s": summary["env_steps_per_s"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--steps", type=int, default=4000)
    parser.add_argument("--period", type=float, default=1.0)
    parser.add_argument("--keep", type=Path, help="write the runs and logs here (default: a temporary folder)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = args.keep or Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        for mode in ("push", "pull"):
            print(json.dumps(run(mode, args, folder)), flush=True)


if __name__ == "__main__":
    main()
