"""Benchmark mode of a real-time env (envs/rtbench.py, ``relayrl worker --benchmark``): the env's timings over N
steps, the policy's inference and the overruns it causes."""

from __future__ import annotations

import json
import time

import numpy as np
import pytest

from relayrl.cli import main
from relayrl.envs.registry import make
from relayrl.envs.rtbench import benchmark, report
from relayrl.errors import EnvError

DRONE = "relayrl.envs.realtime:relayrl/RealTimeDrone-v0"


def test_random_actions_report_every_timing_over_the_steps_asked():
    env = make(DRONE, time_step_duration=0.01)
    try:
        timing = benchmark(env, 30)
    finally:
        env.close()
    assert timing["steps"] == 30 and timing["time_step_duration"] == 0.01
    assert timing["step_duration_mean"] >= 0.0095  # (a time step never ends early)
    assert np.isnan(timing["policy_inference_mean"])  # random actions: no policy timed
    text = report(timing)
    assert "overruns" in text and "step duration mean" in text and "(random actions)" in text


def test_a_policy_slower_than_the_time_step_overruns_every_step_and_is_named_the_bottleneck():
    env = make(DRONE, time_step_duration=0.01)
    slow = lambda obs: (time.sleep(0.02), np.zeros(1, np.float32))[1]  # noqa: E731 - twice the time step
    try:
        timing = benchmark(env, 12, act=slow)
    finally:
        env.close()
    assert timing["policy_inference_mean"] >= 0.02 and timing["inference_mean"] >= 0.02
    assert timing["overruns"] == timing["steps"]  # every time step ran long
    assert timing["overrun_share"] == 1.0
    assert "the caller is the bottleneck" in report(timing)


def test_an_env_that_is_not_real_time_is_refused():
    env = make("Pendulum-v1")
    with pytest.raises(EnvError, match="not a real-time env"):
        benchmark(env, 5)


def test_relayrl_worker_benchmark_prints_the_timings_as_json_and_exits(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["worker", "--benchmark", "--env", DRONE, "--steps", "20", "--json",
                 "--set", "env.kwargs.time_step_duration=0.01"]) == 0
    timing = json.loads(capsys.readouterr().out)
    assert timing["steps"] == 20 and timing["time_step_duration"] == 0.01 and timing["policy_inference_mean"] is None
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize("args, words", [
    (["--env", "Pendulum-v1"], "not a real-time env"),
    (["--env", DRONE, "--server", "127.0.0.1:9"], "drop --server"),
    (["--env", DRONE, "--policy", "relayrl.testing.scripted:nothing_here"], "has no 'nothing_here'"),
])
def test_relayrl_worker_benchmark_bad_input_exits_2(args, words, capsys):
    assert main(["worker", "--benchmark", "--steps", "5", *args]) == 2
    err = capsys.readouterr().err
    assert words in err and "Traceback" not in err
