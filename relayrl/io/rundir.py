"""The run directory (DESIGN.md): config.yaml, metrics.jsonl, TensorBoard events, checkpoints/, summary.json."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from relayrl.io.atomic import atomic_write_text

SUMMARY_KEYS = (
    "algo", "env", "seed", "backend", "env_steps", "updates", "wall_time_s", "env_steps_per_s",
    "best_eval_return", "last_eval_return", "stop_value", "solved",
    "time_to_stop_value_s", "env_steps_to_stop_value",
)


def new_run_dir(env_id: str, algo: str, root: Path = Path("runs")) -> Path:
    """``runs/<env>_<algo>_<timestamp>``; a suffix keeps two runs started in one second apart."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    base = root / f"{env_id.replace('/', '-')}_{algo}_{stamp}"
    path, k = base, 1
    while path.exists():
        path, k = Path(f"{base}-{k}"), k + 1
    return path


def write_summary(run_dir: Path, summary: dict[str, Any]) -> None:
    missing = [key for key in SUMMARY_KEYS if key not in summary]
    if missing:
        raise ValueError(f"summary lacks {missing}")
    atomic_write_text(Path(run_dir) / "summary.json", json.dumps(summary, indent=2) + "\n")


def read_summary(run_dir: Path) -> dict[str, Any]:
    return json.loads((Path(run_dir) / "summary.json").read_text())


EXPERIMENT_FILE = "experiment.txt"


def write_experiment_record(run_dir: Path, argv: list[str], changes: list[str], resumed: bool = False) -> Path:
    """Append to ``experiment.txt``, the human-readable record beside config.yaml (roadrunner's
    experiment.info, without its pickle): when, with what, the command line, and the options that
    differ from the defaults (or, on a resume, from the run's saved config)."""
    import platform
    import shlex

    import torch

    from relayrl import __version__

    path = Path(run_dir) / EXPERIMENT_FILE
    lines = [f"{'resumed' if resumed else 'started'} {time.strftime('%Y-%m-%d %H:%M:%S %Z')} on "
             f"{platform.node()}: relayrl {__version__}, python {platform.python_version()}, torch {torch.__version__}",
             f"command: {shlex.join(argv)}",
             ("options changed on resume:" if resumed else "options that differ from the defaults:")
             + ("" if changes else " none")]
    lines += [f"  {change}" for change in changes]
    previous = path.read_text() + "\n" if path.is_file() else ""
    atomic_write_text(path, previous + "\n".join(lines) + "\n")
    return path
