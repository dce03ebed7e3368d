"""Learning curves: eval and train return against env steps and against wall time.

Runs are grouped by their config.yaml without the seed and the options that only say where or how a
run is recorded or executed (``RUN_SPECIFIC``): the runs of a group differ only in seed and are drawn
as their mean with a band of one standard deviation (the legend says so), interpolated onto the union
of their x values; a lone run is drawn as its line. Groups of the same algorithm and env are labelled
apart by the options in which they differ (``ppo CartPole-v1 actor_lr=0.001``). Eval points are
marked, and the stop value is drawn on the eval panels. A folder without metrics.jsonl is skipped
with a warning.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from relayrl.errors import CheckpointError
from relayrl.io.metrics import read_metrics

log = logging.getLogger("relayrl")

PANELS = (("eval", "eval/return_mean", "eval return"), ("train", "train/return_mean", "train return"))
AXES = (("env_steps", "env steps"), ("wall_time_s", "wall time (s)"))
# Options that do not make two runs different experiments: dotted keys, or sections by their name.
RUN_SPECIFIC = ("seed", "threads", "device", "logging", "net.keys", "net.weights_dir")


@dataclass
class Run:
    """One run directory as plot reads it: its options (flattened to dotted keys; None without a readable
    config.yaml) and its stop value (summary.json's, else config.yaml's)."""

    path: Path
    options: dict[str, Any] | None
    stop_value: float | None

    @property
    def base_label(self) -> str:
        if self.options is None:
            return self.path.name
        algo = self.options.get("algo", "?")
        recurrent = self.options.get(f"{algo}.recurrent")
        return f"{algo}{f' ({recurrent})' if recurrent else ''} {self.options.get('env.id', '?')}"

    def experiment(self) -> tuple:
        """What the runs of one group share: everything but the seed and the run-specific options."""
        if self.options is None:
            return ("dir", str(self.path))
        return tuple(sorted((key, _hashable(value)) for key, value in self.options.items() if not _run_specific(key)))


@dataclass
class Group:
    label: str
    runs: list[Run] = field(default_factory=list)


def load_run(run_dir: Path) -> Run:
    import yaml

    run_dir = Path(run_dir)
    options = stop_value = None
    config_path = run_dir / "config.yaml"
    if config_path.is_file():
        try:
            options = _flatten(yaml.safe_load(config_path.read_text()) or {})
        except (yaml.YAMLError, OSError) as exc:
            log.warning(f"{str(config_path)!r} is unreadable ({exc}): run labelled by its folder name")
        else:
            stop_value = options.get("stop_value")
    summary_path = run_dir / "summary.json"
    if summary_path.is_file():
        try:
            stop_value = json.loads(summary_path.read_text()).get("stop_value", stop_value)
        except (json.JSONDecodeError, OSError):
            pass  # a summary being written: config.yaml's stop value stands
    return Run(run_dir, options, stop_value)


def run_label(run_dir: Path) -> str:
    return load_run(run_dir).base_label


def group_runs(runs: list[Run]) -> list[Group]:
    """Runs that differ only in seed (and run-specific options) share a group; groups of the same algorithm
    and env are labelled apart by the options in which they differ."""
    by_experiment: dict[tuple, list[Run]] = {}
    for run in runs:
        by_experiment.setdefault(run.experiment(), []).append(run)
    groups = list(by_experiment.values())
    labels = []
    for members in groups:
        base = members[0].base_label
        rivals = [other[0] for other in groups if other[0].base_label == base]
        differing = _differing_keys([rival.options for rival in rivals if rival.options is not None])
        algo = (members[0].options or {}).get("algo")
        extras = [f"{_short_key(key, algo)}={_format((members[0].options or {}).get(key, '-'))}" for key in differing]
        labels.append(" ".join([base, *extras]))
    return [Group(label, members) for label, members in zip(labels, groups)]


def curves(run_dir: Path, event: str, key: str, x_key: str) -> tuple[np.ndarray, np.ndarray]:
    rows = [e for e in read_metrics(run_dir) if e.get("event") == event and e.get(key) is not None]
    return np.array([r[x_key] for r in rows], dtype=float), np.array([r[key] for r in rows], dtype=float)


def readable_runs(run_dirs: list[Path]) -> list[Run]:
    """The runs that have a metrics.jsonl, warning about each folder skipped; an error when none has."""
    runs, skipped = [], []
    for run_dir in dict.fromkeys(Path(d) for d in run_dirs):  # each folder once, in the order given
        if (run_dir / "metrics.jsonl").is_file():
            runs.append(load_run(run_dir))
            continue
        reason = "no such folder" if not run_dir.exists() else "no metrics.jsonl"
        log.warning(f"skipping {str(run_dir)!r}: {reason} (not a run directory written by relayrl train)")
        skipped.append(str(run_dir))
    if not runs:
        raise CheckpointError(f"nothing to plot: none of {', '.join(repr(s) for s in skipped)} has a metrics.jsonl; "
                              "pass run directories written by relayrl train")
    return runs


def plot_runs(run_dirs: list[Path], output: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = group_runs(readable_runs(run_dirs))
    fig, axes = plt.subplots(len(PANELS), len(AXES), figsize=(11, 7), squeeze=False, layout="constrained")
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    stop_values = sorted({run.stop_value for group in groups for run in group.runs if run.stop_value is not None})
    for row, (event, key, title) in enumerate(PANELS):
        for col, (x_key, x_label) in enumerate(AXES):
            ax = axes[row][col]
            for index, group in enumerate(groups):
                _draw_group(ax, group, event, key, x_key, colors[index % len(colors)])
            if event == "eval":
                for value, style in zip(stop_values, ["--", ":", "-.", (0, (5, 5))] * len(stop_values)):
                    ax.axhline(value, color="0.35", linestyle=style, linewidth=1, label=f"stop value {value:g}")
            ax.set_xlabel(x_label)
            ax.set_ylabel(title)
            ax.grid(alpha=0.3)
    handles = {}
    for ax in fig.axes:  # one legend for the figure: a group with no eval yet still has its train line
        for handle, label in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(label, handle)
    if handles:
        fig.legend(list(handles.values()), list(handles), loc="outside lower center", fontsize=9,
                   ncol=1 if max(map(len, handles)) > 45 else 2)
    output = Path(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(output, dpi=100)
    plt.close(fig)
    return output


def _draw_group(ax: Any, group: Group, event: str, key: str, x_key: str, color: str) -> None:
    data = [curves(run.path, event, key, x_key) for run in group.runs]
    data = [(x, y) for x, y in data if len(x)]
    if not data:
        return
    marker = {"marker": "o", "markersize": 3} if event == "eval" else {}  # an eval point is a real evaluation
    if len(data) == 1:
        ax.plot(*data[0], color=color, label=group.label, **marker)
        return
    grid = np.unique(np.concatenate([x for x, _ in data]))
    # each run counts only over the span it covers: no extrapolation past its ends
    ys = np.array([np.where((grid >= x.min()) & (grid <= x.max()), np.interp(grid, x, y), np.nan) for x, y in data])
    with np.errstate(all="ignore"):
        mean, std = np.nanmean(ys, axis=0), np.nanstd(ys, axis=0)
    seeds = [(run.options or {}).get("seed") for run in group.runs]
    what = "seeds" if len(set(seeds)) == len(seeds) and None not in seeds else "runs"
    ax.plot(grid, mean, color=color, label=f"{group.label} (mean ± std of {len(data)} {what})", **marker)
    ax.fill_between(grid, mean - std, mean + std, alpha=0.25, color=color, linewidth=0)


def _flatten(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        if isinstance(value, dict) and value:
            flat.update(_flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def _run_specific(key: str) -> bool:
    return any(key == name or key.startswith(f"{name}.") for name in RUN_SPECIFIC)


def _differing_keys(options: list[dict[str, Any]]) -> list[str]:
    keys = sorted({key for each in options for key in each if not _run_specific(key)})
    return [key for key in keys if len({_hashable(each.get(key, "-")) for each in options}) > 1]


def _short_key(key: str, algo: str | None) -> str:
    return key[len(algo) + 1:] if algo and key.startswith(f"{algo}.") else key


def _format(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, (list, dict, bool)) or value is None:
        return json.dumps(value)
    return str(value)


def _hashable(value: Any) -> Any:
    return json.dumps(value, sort_keys=True) if isinstance(value, (list, dict)) else value
