"""Metrics sinks: one JSON object per line in metrics.jsonl, TensorBoard event files, and a Weights & Biases run.

Every event carries ``event`` (its kind), ``env_steps`` and ``wall_time_s``; other keys are
``group/name`` scalars that become TensorBoard tags and W&B keys as they are (W&B plots them against
``env_steps``).
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from relayrl.errors import ConfigError, install_hint

if TYPE_CHECKING:
    from relayrl.options import WandbConfig

WANDB_ID_FILE = "wandb_run_id"  # in the run directory: a resume continues the same W&B run


class MetricsLogger:
    """metrics.jsonl always; TensorBoard unless ``tensorboard`` is false; W&B when ``wandb`` is given and
    active (``run_config`` becomes the W&B run's config, ``resume`` continues the W&B run of ``run_dir``)."""

    def __init__(self, run_dir: Path, tensorboard: bool = True, wandb: WandbConfig | None = None,
                 run_config: dict[str, Any] | None = None, resume: bool = False):
        self.path = Path(run_dir) / "metrics.jsonl"
        self._tb = self._wandb = None
        if wandb is not None and wandb.active:  # first: it can refuse to start
            self._wandb = WandbSink(wandb, Path(run_dir), run_config or {}, resume)
        try:
            self._file = open(self.path, "a", buffering=1)  # line-buffered: a crash loses no logged line
            if tensorboard:
                from tensorboardX import SummaryWriter

                self._tb = SummaryWriter(logdir=str(run_dir), flush_secs=10)
        except BaseException:
            if self._wandb is not None:
                self._wandb.close(None, failed=True)
            raise

    def log(self, event: str, env_steps: int, wall_time_s: float, values: dict[str, Any]) -> None:
        record = {"event": event, "env_steps": int(env_steps), "wall_time_s": round(wall_time_s, 4)}
        values = {key: _jsonable(value) for key, value in values.items()}
        record.update(values)
        self._file.write(json.dumps(record) + "\n")
        if self._tb is not None:
            for key, value in values.items():
                if _is_scalar(value):
                    self._tb.add_scalar(key, value, env_steps)
        if self._wandb is not None:
            self._wandb.log(record)

    def close(self, summary: dict[str, Any] | None = None, failed: bool = False) -> None:
        """Close every sink; ``summary`` (summary.json's keys) becomes the W&B run's summary, and ``failed``
        marks the W&B run as failed (exit code 1). Each sink is closed even if another fails."""
        try:
            self._file.close()
            if self._tb is not None:
                self._tb.close()
        finally:
            if self._wandb is not None:
                self._wandb.close(summary, failed)
                self._wandb = None


class WandbSink:
    """One W&B run for one relayrl run: ``log`` mirrors an event (every scalar, with ``env_steps`` as the
    x axis of every chart), ``close`` writes the summary and finishes the run, whatever ended it."""

    def __init__(self, settings: WandbConfig, run_dir: Path, run_config: dict[str, Any], resume: bool):
        wandb = require_wandb()
        id_file = run_dir / WANDB_ID_FILE
        run_id = id_file.read_text().strip() if resume and id_file.is_file() else None  # None: a new W&B run
        folder = os.environ.get("WANDB_DIR") or str(run_dir)  # the run's files stay with the run by default
        try:
            self.run = wandb.init(
                project=settings.project or os.environ.get("WANDB_PROJECT") or "relayrl", entity=settings.entity,
                group=settings.group, name=settings.name or run_dir.name, tags=list(settings.tags) or None,
                mode=settings.mode, config=run_config, dir=folder, id=run_id, resume="allow" if run_id else None,
                reinit="create_new",  # a run of its own, never wandb's global one: two trainers in one process
                settings=wandb.Settings(console="off"),  # leave relayrl's terminal (progress bar, stderr) as it is
            )
        except Exception as exc:  # e.g. online without `wandb login`, or no network
            mode = settings.mode or os.environ.get("WANDB_MODE") or "online"
            raise ConfigError(f"W&B could not start a run (mode {mode}): {str(exc).strip()}; log in with "
                              "`wandb login`, or train offline with --set logging.wandb.mode=offline "
                              "(then `wandb sync`)") from None
        id_file.write_text(self.run.id + "\n")
        self.run.define_metric("env_steps")
        self.run.define_metric("*", step_metric="env_steps")

    def log(self, record: dict[str, Any]) -> None:
        self.run.log({key: value for key, value in record.items() if _is_scalar(value)})

    def close(self, summary: dict[str, Any] | None, failed: bool) -> None:
        try:
            if summary:
                self.run.summary.update(summary)  # the final env_steps, best_eval_return, stop_reason, ...
        finally:
            self.run.finish(exit_code=1 if failed else 0)


def require_wandb():
    """The ``wandb`` module, or a ConfigError saying how to install it (checked before a run writes anything)."""
    try:
        import wandb
    except ImportError:
        raise ConfigError("--track (logging.wandb) needs the wandb package, which is not installed: install "
                          f"relayrl's wandb extra, {install_hint('wandb')}, or drop --track") from None
    return wandb


def check_tracking(wandb: WandbConfig) -> None:
    """Refuse an active W&B section (enabled, or a project set) without the package, before anything is written."""
    if wandb.active:
        require_wandb()


def _is_scalar(value: Any) -> bool:
    """A finite int or float (non-finite values are None by now; bools and strings are not plotted)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _jsonable(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if hasattr(value, "item"):
        return _jsonable(value.item())
    return value


def read_metrics(run_dir: Path) -> list[dict[str, Any]]:
    """All events of a run, skipping a torn last line (a run killed mid-write)."""
    path = Path(run_dir) / "metrics.jsonl"
    events = []
    for line in path.read_text().splitlines():
        try:
            events.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return events
