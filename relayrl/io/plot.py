"""Learning curves: eval and train return against env steps and against wall time.

Runs that share a label (same algo and env, different seeds) are drawn as their mean with a band
of one standard deviation, interpolated onto a common x grid; a lone run is drawn as a line.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import numpy as np

from relayrl.errors import CheckpointError
from relayrl.io.metrics import read_metrics

PANELS = (("eval", "eval/return_mean", "eval return"), ("train", "train/return_mean", "train return"))
AXES = (("env_steps", "env steps"), ("wall_time_s", "wall time (s)"))


def run_label(run_dir: Path) -> str:
    import yaml

    config_path = run_dir / "config.yaml"
    if config_path.is_file():
        config = yaml.safe_load(config_path.read_text()) or {}
        algo = config.get("algo", "?")
        recurrent = (config.get(algo) or {}).get("recurrent") if isinstance(config.get(algo), dict) else None
        return f"{algo}{f' ({recurrent})' if recurrent else ''} {config.get('env', {}).get('id', '?')}"
    return run_dir.name


def curves(run_dir: Path, event: str, key: str, x_key: str) -> tuple[np.ndarray, np.ndarray]:
    rows = [e for e in read_metrics(run_dir) if e.get("event") == event and e.get(key) is not None]
    return np.array([r[x_key] for r in rows], dtype=float), np.array([r[key] for r in rows], dtype=float)


def plot_runs(run_dirs: list[Path], output: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    for run_dir in run_dirs:
        if not (Path(run_dir) / "metrics.jsonl").is_file():
            raise CheckpointError(f"{str(run_dir)!r} has no metrics.jsonl: pass run directories written by relayrl train")
    groups: dict[str, list[Path]] = defaultdict(list)
    for run_dir in run_dirs:
        groups[run_label(Path(run_dir))].append(Path(run_dir))

    fig, axes = plt.subplots(len(PANELS), len(AXES), figsize=(11, 7), squeeze=False)
    for row, (event, key, title) in enumerate(PANELS):
        for col, (x_key, x_label) in enumerate(AXES):
            ax = axes[row][col]
            for label, members in groups.items():
                data = [curves(m, event, key, x_key) for m in members]
                data = [(x, y) for x, y in data if len(x)]
                if not data:
                    continue
                name = f"{label} ({len(data)} runs)" if len(data) > 1 else label
                if len(data) == 1:
                    ax.plot(*data[0], label=name)
                    continue
                grid = np.linspace(min(x.min() for x, _ in data), max(x.max() for x, _ in data), 200)
                # each run counts only over the span it covers: no extrapolation past its ends
                ys = np.array([np.where((grid >= x.min()) & (grid <= x.max()), np.interp(grid, x, y), np.nan)
                               for x, y in data])
                with np.errstate(all="ignore"):
                    mean, std = np.nanmean(ys, axis=0), np.nanstd(ys, axis=0)
                line, = ax.plot(grid, mean, label=name)
                ax.fill_between(grid, mean - std, mean + std, alpha=0.25, color=line.get_color())
            ax.set_xlabel(x_label)
            ax.set_ylabel(title)
            ax.grid(alpha=0.3)
            if ax.get_legend_handles_labels()[0]:
                ax.legend(fontsize=8)
    fig.tight_layout()
    output = Path(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(output, dpi=100)
    plt.close(fig)
    return output
