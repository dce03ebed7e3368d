"""relayrl.io.plot: learning-curve PNGs from run directories."""

from __future__ import annotations

import json

import numpy as np
import pytest
import yaml

from relayrl.errors import CheckpointError
from relayrl.io.plot import curves, plot_runs, run_label

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def fake_run(root, name, *, algo="ppo", env="CartPole-v1", seed=0, evals=5, scale=1.0, config=True):
    run = root / name
    run.mkdir(parents=True)
    if config:
        (run / "config.yaml").write_text(yaml.safe_dump({"algo": algo, "seed": seed, "env": {"id": env}}))
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


def test_plot_three_runs_groups_seeds(tmp_path, captured_figures):
    runs = [fake_run(tmp_path, "a", seed=0), fake_run(tmp_path, "b", seed=1),
            fake_run(tmp_path, "c", algo="sac", env="Pendulum-v1", seed=2, scale=-1.0)]
    out = plot_runs(runs, tmp_path / "three.png")
    assert_png(out)
    (fig,) = captured_figures
    labels = sorted(line.get_label() for line in fig.axes[0].get_lines())
    assert labels == ["ppo CartPole-v1 (2 runs)", "sac Pendulum-v1"]
    # the two seeds are drawn as a mean with a std band
    assert len(fig.axes[0].collections) == 1
    group_line = next(l for l in fig.axes[0].get_lines() if "(2 runs)" in l.get_label())
    assert len(group_line.get_xdata()) == 200


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


def test_directory_without_metrics_raises_checkpoint_error(tmp_path):
    good = fake_run(tmp_path, "good")
    empty = tmp_path / "empty"
    empty.mkdir()
    out = tmp_path / "out.png"
    with pytest.raises(CheckpointError, match="metrics.jsonl") as info:
        plot_runs([good, empty], out)
    assert str(empty) in str(info.value)
    assert not out.exists()


def test_run_labels_name_a_recurrent_policy(tmp_path):
    from relayrl.io.plot import run_label

    (tmp_path / "config.yaml").write_text("algo: ppo\nenv: {id: relayrl/CartPoleNoVel-v1}\nppo: {recurrent: gru}\n")
    assert run_label(tmp_path) == "ppo (gru) relayrl/CartPoleNoVel-v1"
    (tmp_path / "config.yaml").write_text("algo: ppo\nenv: {id: CartPole-v1}\nppo: {recurrent: null}\n")
    assert run_label(tmp_path) == "ppo CartPole-v1"
