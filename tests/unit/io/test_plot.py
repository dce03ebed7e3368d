"""relayrl.io.plot: learning-curve PNGs from run directories."""

from __future__ import annotations

import json

import numpy as np
import pytest
import yaml

from relayrl.errors import CheckpointError
from relayrl.io.plot import curves, plot_runs, run_label

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def fake_run(root, name, *, algo="ppo", env="CartPole-v1", seed=0, evals=5, scale=1.0, config=True, sets=(),
             summary_stop_value=None):
    """A run directory as relayrl train writes it: the resolved config.yaml, metrics.jsonl, and summary.json when
    ``summary_stop_value`` is given."""
    from relayrl.config import build_config, save_config

    run = root / name
    run.mkdir(parents=True)
    if config:
        save_config(build_config(algo, sets=list(sets), overrides={"seed": seed, "env.id": env}), run / "config.yaml")
    if summary_stop_value is not None:
        (run / "summary.json").write_text(json.dumps({"algo": algo, "stop_value": summary_stop_value}))
    rng = np.random.default_rng(seed)
    lines = []
    for i in range(1, evals + 1):
        steps = 1000 * i + 37 * seed  # runs do not share x values
        lines.append({"event": "train", "env_steps": steps - 500, "wall_time_s": 0.5 * i - 0.2,
                      "train/return_mean": float(scale * 20 * i + rng.normal()), "train/loss": 0.1})
        lines.append({"event": "eval", "env_steps": steps, "wall_time_s": 0.5 * i,
                      "eval/return_mean": float(scale * 25 * i + rng.normal()), "eval/return_std": 1.0})
    lines.append({"event": "train", "env_steps": 99999, "wall_time_s": 99.0, "train/return_mean": None})
    (run / "metrics.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    return run


def labels(ax):
    return sorted(line.get_label() for line in ax.get_lines())


@pytest.fixture
def captured_figures(monkeypatch):
    """Keep the figures plot_runs draws so their contents can be checked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figures = []
    real_close = plt.close

    def close(fig=None):
        figures.append(fig)
        real_close(fig)

    monkeypatch.setattr(plt, "close", close)
    return figures


def assert_png(path):
    data = path.read_bytes()
    assert data.startswith(PNG_MAGIC)
    assert len(data) > 10_000  # four panels with axes, not an empty image


def test_plot_one_run(tmp_path, captured_figures):
    run = fake_run(tmp_path, "run0")
    out = plot_runs([run], tmp_path / "plots" / "curves.png")
    assert out == tmp_path / "plots" / "curves.png"
    assert_png(out)
    (fig,) = captured_figures
    axes = fig.axes
    assert len(axes) == 4
    eval_steps_ax = axes[0]
    (line,) = eval_steps_ax.get_lines()
    np.testing.assert_array_equal(line.get_xdata(), [1000, 2000, 3000, 4000, 5000])
    assert line.get_label() == "ppo CartPole-v1"


def test_runs_that_differ_only_in_seed_are_one_mean_curve_that_says_so(tmp_path, captured_figures):
    runs = [fake_run(tmp_path, "a", seed=0), fake_run(tmp_path, "b", seed=1),
            fake_run(tmp_path, "c", algo="sac", env="Pendulum-v1", seed=2, scale=-1.0)]
    out = plot_runs(runs, tmp_path / "three.png")
    assert_png(out)
    (fig,) = captured_figures
    assert labels(fig.axes[0]) == ["ppo CartPole-v1 (mean ± std of 2 seeds)", "sac Pendulum-v1"]
    # the two seeds are drawn as a mean with a std band, over the eval points of both
    assert len(fig.axes[0].collections) == 1
    group_line = next(l for l in fig.axes[0].get_lines() if "2 seeds" in l.get_label())
    np.testing.assert_array_equal(group_line.get_xdata(), sorted([1000 * i for i in range(1, 6)]
                                                                 + [1000 * i + 37 for i in range(1, 6)]))


def test_runs_with_other_options_are_labelled_apart_by_those_options(tmp_path, captured_figures):
    runs = [fake_run(tmp_path, f"lr{lr}_s{seed}", seed=seed, sets=[f"ppo.actor_lr={lr}"],
                     scale=1.0 if lr == 0.001 else 0.5) for lr in (0.001, 0.0003) for seed in (0, 1)]
    # run-specific options (where the run is tracked, the threads it used) do not split the seeds apart
    runs.append(fake_run(tmp_path, "lr0.001_s2", seed=2, sets=["ppo.actor_lr=0.001", "logging.wandb.name=third",
                                                               "threads=2"]))
    plot_runs(runs, tmp_path / "lr.png")
    (fig,) = captured_figures
    assert labels(fig.axes[0]) == ["ppo CartPole-v1 actor_lr=0.0003 (mean ± std of 2 seeds)",
                                   "ppo CartPole-v1 actor_lr=0.001 (mean ± std of 3 seeds)"]
    assert len(fig.axes[0].collections) == 2  # a band for each
    assert {text.get_text() for text in fig.legends[0].get_texts()} >= set(labels(fig.axes[0]))


def test_runs_of_one_seed_are_labelled_runs_not_seeds(tmp_path, captured_figures):
    plot_runs([fake_run(tmp_path, "a"), fake_run(tmp_path, "b")], tmp_path / "same.png")
    assert labels(captured_figures[0].axes[0]) == ["ppo CartPole-v1 (mean ± std of 2 runs)"]


def test_the_stop_value_is_drawn_and_the_eval_points_marked(tmp_path, captured_figures):
    solved = fake_run(tmp_path, "solved", summary_stop_value=475.0)  # summary.json: the stop value the run used
    running = fake_run(tmp_path, "running", sets=["stop_value=100"])  # no summary yet: config.yaml's
    plot_runs([solved, running], tmp_path / "stop.png")
    (fig,) = captured_figures
    eval_steps, eval_time, train_steps, train_time = fig.axes
    for ax in (eval_steps, eval_time):
        stops = {line.get_label(): set(line.get_ydata()) for line in ax.get_lines() if line.get_label().startswith("stop value")}
        assert stops == {"stop value 100": {100.0}, "stop value 475": {475.0}}
        curve = next(line for line in ax.get_lines() if line.get_label() == "ppo CartPole-v1 stop_value=100")
        assert curve.get_marker() == "o"  # every evaluation is a visible point
        assert len(curve.get_xdata()) == 5
    for ax in (train_steps, train_time):
        assert not [line for line in ax.get_lines() if line.get_label().startswith("stop value")]
        assert {line.get_marker() for line in ax.get_lines()} == {"None"}


def test_plot_run_without_config_uses_dir_name(tmp_path, captured_figures):
    run = fake_run(tmp_path, "my_run", config=False)
    assert run_label(run) == "my_run"
    assert_png(plot_runs([run], tmp_path / "x.png"))
    assert [l.get_label() for l in captured_figures[0].axes[0].get_lines()] == ["my_run"]


def test_curves_filters_event_and_null_values(tmp_path):
    run = fake_run(tmp_path, "r", evals=3)
    x, y = curves(run, "train", "train/return_mean", "env_steps")
    np.testing.assert_array_equal(x, [500, 1500, 2500])  # the null row at 99999 is dropped
    assert y.dtype == float and len(y) == 3
    x, _ = curves(run, "eval", "eval/return_mean", "wall_time_s")
    np.testing.assert_array_equal(x, [0.5, 1.0, 1.5])


def test_a_folder_without_metrics_is_skipped_with_a_warning(tmp_path, captured_figures, caplog):
    good = fake_run(tmp_path, "good")
    empty = tmp_path / "empty"
    empty.mkdir()
    out = plot_runs([good, empty, tmp_path / "missing"], tmp_path / "out.png")
    assert_png(out)
    assert labels(captured_figures[0].axes[0]) == ["ppo CartPole-v1"]
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 2
    assert str(empty) in warnings[0] and "metrics.jsonl" in warnings[0]
    assert str(tmp_path / "missing") in warnings[1] and "no such folder" in warnings[1]


def test_no_folder_with_metrics_is_a_clear_error_with_exit_code_2(tmp_path, run_cli, capsys):
    empty = tmp_path / "empty"
    empty.mkdir()
    out = tmp_path / "out.png"
    with pytest.raises(CheckpointError, match="metrics.jsonl"):
        plot_runs([empty], out)
    assert run_cli(["plot", str(empty), str(tmp_path / "missing"), "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert "relayrl: error: nothing to plot" in err and str(empty) in err and "Traceback" not in err
    assert not out.exists()


def test_run_labels_name_a_recurrent_policy(tmp_path):
    from relayrl.io.plot import run_label

    (tmp_path / "config.yaml").write_text("algo: ppo\nenv: {id: relayrl/CartPoleNoVel-v1}\nppo: {recurrent: gru}\n")
    assert run_label(tmp_path) == "ppo (gru) relayrl/CartPoleNoVel-v1"
    (tmp_path / "config.yaml").write_text("algo: ppo\nenv: {id: CartPole-v1}\nppo: {recurrent: null}\n")
    assert run_label(tmp_path) == "ppo CartPole-v1"
