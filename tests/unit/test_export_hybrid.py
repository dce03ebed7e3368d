"""relayrl export of a policy with hybrid actions (relayrl/envs/hybrid.py): two outputs, ``continuous_action``
[n, C] float32 (the means clipped to the bounds) and ``discrete_action`` [n, B] int64 (each branch's argmax plus
the space's start), then a recurrent policy's ``next_state``; run by onnxruntime or torch.jit.load alone,
they equal ``predict``'s (continuous, discrete)."""

from __future__ import annotations

import json

import gymnasium as gym
import numpy as np
import pytest

from relayrl.envs.hybrid import hybrid_layout

from test_export import build, observations, run_exported  # same folder

pytest.importorskip("onnxruntime")
pytestmark = pytest.mark.filterwarnings("ignore:`torch.jit.load` is deprecated:DeprecationWarning")

VECTOR = gym.spaces.Box(-np.inf, np.inf, (5,), np.float32)
HYBRID = gym.spaces.Tuple((gym.spaces.Box(-0.5, 2.0, (2,), np.float32), gym.spaces.MultiDiscrete([3, 4], start=[1, 0])))
CASES = {
    "ppo-hybrid-obs_norm": ("ppo", ["ppo.obs_norm=true"]),
    "appo-hybrid": ("appo", []),
    "ppo-hybrid-lstm": ("ppo", ["ppo.recurrent=lstm", "ppo.recurrent_hidden=16"]),
}


@pytest.mark.parametrize("fmt", ["onnx", "torchscript"])
@pytest.mark.parametrize("case", list(CASES))
def test_the_exported_hybrid_policy_gives_predict_s_two_parts(tmp_path, case, fmt):
    from relayrl.export import export_policy

    algo, sets = CASES[case]
    policy = build(algo, VECTOR, HYBRID, sets)
    exported = export_policy(policy, tmp_path / f"policy.{fmt}", fmt)
    obs = observations(VECTOR)
    if policy.recurrent:  # two steps, the state carried by the caller
        (want_c, want_d), want_state = policy.predict(obs, None)
        got_c, got_d, got_state = run_exported(exported.path, fmt, obs, np.zeros((100, policy.state_size), np.float32))
        np.testing.assert_allclose(got_state, want_state, rtol=1e-5, atol=1e-6)
        (want_c, want_d), _ = policy.predict(obs[::-1].copy(), want_state)
        got_c, got_d, _ = run_exported(exported.path, fmt, obs[::-1].copy(), got_state)
    else:
        (got_c, got_d), (want_c, want_d) = run_exported(exported.path, fmt, obs), policy.predict(obs)
    assert got_c.shape == want_c.shape == (100, 2) and got_c.dtype == np.float32
    assert got_d.shape == want_d.shape == (100, 2) and got_d.dtype == want_d.dtype == np.int64
    np.testing.assert_allclose(got_c, want_c, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(got_d, want_d)
    assert (got_c >= -0.5).all() and (got_c <= 2.0).all() and (got_c == 2.0).any()  # clipped to the bounds
    assert set(np.unique(got_d[:, 0])) <= {1, 2, 3} and len(np.unique(got_d[:, 0])) > 1  # start 1, not constant
    sidecar = json.loads(exported.sidecar.read_text())
    names = [o["name"] for o in sidecar["outputs"]]
    assert names == ["continuous_action", "discrete_action", *(["next_state"] if policy.recurrent else [])]
    assert sidecar["outputs"][:2] == [{"name": "continuous_action", "dtype": "float32", "shape": ["batch", 2]},
                                      {"name": "discrete_action", "dtype": "int64", "shape": ["batch", 2]}]
    assert sidecar["action_space"]["type"] == "Hybrid"  # (envs/space_data.py)
    assert [s["type"] for s in sidecar["action_space"]["spaces"]] == ["Box", "MultiDiscrete"]
    assert hybrid_layout(policy.action_space).width == 4
