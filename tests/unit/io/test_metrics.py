"""relayrl.io.metrics: JSONL events, non-finite values, torn lines, TensorBoard event files."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from relayrl.io.metrics import MetricsLogger, read_metrics
from relayrl.testing.tensorboard import tensorboard_scalars


def test_one_json_object_per_line_with_required_keys(tmp_path):
    logger = MetricsLogger(tmp_path, tensorboard=False)
    logger.log("train", 128, 1.23456789, {"train/loss": 0.5, "updates": 4, "train/episodes": np.int64(3)})
    logger.log("eval", 256, 2.5, {"eval/return_mean": np.float32(21.5)})
    logger.close()

    lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
    assert len(lines) == 2
    first, second = (json.loads(line) for line in lines)
    assert first == {"event": "train", "env_steps": 128, "wall_time_s": 1.2346, "train/loss": 0.5,
                     "updates": 4, "train/episodes": 3}
    assert second == {"event": "eval", "env_steps": 256, "wall_time_s": 2.5, "eval/return_mean": 21.5}
    assert type(first["env_steps"]) is int
    assert read_metrics(tmp_path) == [first, second]


def test_lines_are_on_disk_before_close(tmp_path):
    logger = MetricsLogger(tmp_path, tensorboard=False)
    logger.log("train", 1, 0.0, {"a": 1.0})
    # line-buffered: a crash right now would not lose the line
    assert read_metrics(tmp_path) == [{"event": "train", "env_steps": 1, "wall_time_s": 0.0, "a": 1.0}]
    logger.close()


def test_logger_appends_to_existing_metrics(tmp_path):
    for steps in (1, 2):
        logger = MetricsLogger(tmp_path, tensorboard=False)
        logger.log("train", steps, 0.1, {})
        logger.close()
    assert [e["env_steps"] for e in read_metrics(tmp_path)] == [1, 2]


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -float("inf"), np.float32("nan"),
                                   np.float64("-inf")])
def test_non_finite_floats_become_null(tmp_path, value):
    logger = MetricsLogger(tmp_path, tensorboard=False)
    logger.log("train", 1, 0.0, {"train/loss": value, "ok": 1.5})
    logger.close()
    text = (tmp_path / "metrics.jsonl").read_text()
    assert "NaN" not in text and "Infinity" not in text
    record = json.loads(text, parse_constant=lambda c: pytest.fail(f"non-standard JSON constant {c}"))
    assert record["train/loss"] is None
    assert record["ok"] == 1.5


def test_read_metrics_skips_torn_last_line(tmp_path):
    logger = MetricsLogger(tmp_path, tensorboard=False)
    for steps in (10, 20):
        logger.log("train", steps, 0.5, {"x": 1.0})
    logger.close()
    with open(tmp_path / "metrics.jsonl", "a") as f:
        f.write('{"event": "train", "env_steps": 30, "wall_ti')  # killed mid-write
    events = read_metrics(tmp_path)
    assert [e["env_steps"] for e in events] == [10, 20]


def test_tensorboard_event_file_written_when_enabled(tmp_path):
    logger = MetricsLogger(tmp_path, tensorboard=True)
    logger.log("train", 100, 1.0, {"train/loss": 0.25, "train/nan": float("nan"), "flag": True})
    logger.log("train", 200, 2.0, {"train/loss": 0.125})
    logger.close()
    files = list(tmp_path.glob("events.out.tfevents.*"))
    assert len(files) == 1 and files[0].stat().st_size > 0
    scalars = tensorboard_scalars(tmp_path)
    assert scalars["train/loss"] == [(100, 0.25), (200, 0.125)]
    assert "train/nan" not in scalars and "flag" not in scalars  # non-finite and bools are skipped


def test_no_tensorboard_files_when_disabled(tmp_path):
    logger = MetricsLogger(tmp_path, tensorboard=False)
    logger.log("train", 100, 1.0, {"train/loss": 0.25})
    logger.close()
    assert [p.name for p in tmp_path.iterdir()] == ["metrics.jsonl"]


def test_numpy_scalars_reach_tensorboard(tmp_path):
    logger = MetricsLogger(tmp_path, tensorboard=True)
    logger.log("train", 5, 1.0, {"train/loss": np.float32(0.5), "train/episodes": np.int64(3)})
    logger.close()
    scalars = tensorboard_scalars(tmp_path)
    assert scalars.get("train/loss") == [(5, 0.5)]
    assert scalars.get("train/episodes") == [(5, 3.0)]


def test_overflowed_float_and_torch_scalar(tmp_path):
    import torch

    logger = MetricsLogger(tmp_path, tensorboard=False)
    overflow = 1e308 * 10
    assert math.isinf(overflow)
    logger.log("eval", 0, 0.0, {"eval/return_mean": overflow, "train/kl": torch.tensor(0.25),
                                "train/bad": torch.tensor(float("nan"))})
    logger.close()
    (record,) = read_metrics(tmp_path)
    assert record["eval/return_mean"] is None
    assert record["train/kl"] == 0.25
    assert record["train/bad"] is None
