"""Mirror specs (roadrunner's signed indices) and the mirror loss."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from relayrl.errors import ConfigError
from relayrl.policy.mirror import BUILT_IN, MirrorSpec, mirror_loss


def matrix(index: np.ndarray, sign: np.ndarray) -> np.ndarray:
    m = np.zeros((len(index), len(index)))
    m[np.arange(len(index)), index] = sign
    return m


def test_signed_indices_mirror_and_negate():
    spec = MirrorSpec.from_config(obs=[-0.1, 2, 1, -3], act=[1, 0.1])
    mirror = spec.torch()
    x = torch.tensor([[1.0, 2.0, 3.0, 4.0]])
    assert mirror.obs(x).tolist() == [[-1.0, 3.0, 2.0, -4.0]]
    assert mirror.act(torch.tensor([5.0, 6.0])).tolist() == [6.0, 5.0]
    assert torch.equal(mirror.obs(mirror.obs(x)), x)  # an involution


@pytest.mark.parametrize("obs, message", [
    ([1, 2, 0.1], "not a reflection"),            # a 3-cycle, not a swap
    ([0.1, -2, 1], "not a reflection"),           # 1 -> -2 but 2 -> +1: the signs disagree
    ([0.1, 5], "points past its end"),
    ([], "non-empty"),
])
def test_specs_that_are_not_reflections_are_refused(obs, message):
    with pytest.raises(ConfigError, match=message):
        MirrorSpec.from_config(obs=obs, act=[0.1])


@pytest.mark.parametrize("obs", [[-0.0, 1, 2], [0, 1, 2], [0.0, 1, 2], [1, -0.0]])
def test_a_zero_index_must_carry_its_sign_as_0_1(obs):
    # -0.0 compares equal to 0, and -0 in YAML or Python *is* 0: a bare zero would silently keep index 0
    with pytest.raises(ConfigError, match=r"index 0 is written 0.1 to keep it or -0.1 to negate it"):
        MirrorSpec.from_config(obs=obs, act=[0.1])


def test_negative_zero_in_a_spec_file_is_refused_and_minus_0_1_negates(tmp_path):
    path = tmp_path / "spec.yaml"
    for written in ("-0", "-0.0", "0"):
        path.write_text(f"obs: [{written}, 2, 1]\nact: [0.1]\n")
        with pytest.raises(ConfigError, match="observation spec entry 0 is .*-0.1 to negate"):
            MirrorSpec.load(str(path), "Anything-v0", 3, 1)
    path.write_text("obs: [-0.1, 2, 1]\nact: [-0.1]\n")
    spec = MirrorSpec.load(str(path), "Anything-v0", 3, 1)
    assert spec.obs_sign.tolist() == [-1, 1, 1] and spec.act_sign.tolist() == [-1]
    assert spec.torch().obs(torch.tensor([1.0, 2.0, 3.0])).tolist() == [-1.0, 3.0, 2.0]


@pytest.mark.parametrize("entry", [1.5, "1", True, [1]])
def test_entries_other_than_signed_whole_indices_are_refused(entry):
    with pytest.raises(ConfigError, match="observation spec entry 1 is"):
        MirrorSpec.from_config(obs=[0.1, entry], act=[0.1])
    MirrorSpec.from_config(obs=np.array([0.1, 1], dtype=np.float32), act=[0.1])  # a float32 0.1 is still 0.1


def test_sizes_are_checked_against_the_env():
    with pytest.raises(ConfigError, match="3 entries but the observation has 17"):
        MirrorSpec.from_config([0.1, 1, 2], [0.1], obs_size=17)


def test_the_built_in_walker_spec_fits_walker2d():
    spec = MirrorSpec.load("auto", "Walker2d-v5", 17, 6)  # Walker2d-v5: 17 observations, 6 actions
    assert sorted(spec.act_index.tolist()) == list(range(6)) and spec.act_index.tolist() == [3, 4, 5, 0, 1, 2]
    with pytest.raises(ConfigError, match="no built-in mirror spec for 'Hopper-v5'"):
        MirrorSpec.load("auto", "Hopper-v5", 11, 3)
    assert set(BUILT_IN) == {"Walker2d"}


def test_a_spec_file(tmp_path):
    path = tmp_path / "spec.yaml"
    path.write_text("obs: [0.1, -1, 3, 2]\nact: [1, 0.1]\n")
    spec = MirrorSpec.load(str(path), "Anything-v0", 4, 2)
    assert spec.obs_sign.tolist() == [1, -1, 1, 1]
    path.write_text("obs: [0.1]\n")
    with pytest.raises(ConfigError, match="exactly two lists"):
        MirrorSpec.load(str(path), "Anything-v0", 1, 1)


def test_mirror_loss_is_zero_exactly_for_a_symmetric_policy():
    spec = MirrorSpec.from_config(BUILT_IN["Walker2d"]["obs"], BUILT_IN["Walker2d"]["act"])
    m_obs, m_act = matrix(spec.obs_index, spec.obs_sign), matrix(spec.act_index, spec.act_sign)
    rng = np.random.default_rng(0)
    w = rng.normal(size=(6, 17))
    symmetric = (w + m_act @ w @ m_obs) / 2  # commutes with the reflection
    obs = torch.tensor(rng.normal(size=(64, 17)), dtype=torch.float32)
    mirror = spec.torch()

    def linear(weights):
        t = torch.tensor(weights, dtype=torch.float32)
        return lambda x: torch.tanh(x @ t.T)

    assert mirror_loss(linear(symmetric), obs, mirror).item() < 1e-10
    assert mirror_loss(linear(w), obs, mirror).item() > 0.01
