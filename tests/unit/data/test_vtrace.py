import numpy as np

from relayrl.data.gae import compute_gae
from relayrl.data.vtrace import compute_vtrace


def _rollout(rng, steps=12, envs=3):
    rewards = rng.normal(size=(steps, envs)).astype(np.float32)
    values = rng.normal(size=(steps, envs)).astype(np.float32)
    next_values = rng.normal(size=(steps, envs)).astype(np.float32)
    terminated = rng.random((steps, envs)) < 0.1
    truncated = (rng.random((steps, envs)) < 0.1) & ~terminated
    return rewards, values, next_values, terminated, truncated


def test_on_policy_vtrace_is_gae():
    rng = np.random.default_rng(0)
    rewards, values, next_values, terminated, truncated = _rollout(rng)
    # within an episode next_values[t] is values[t+1]: the convention both functions share
    cont = ~(terminated | truncated)
    next_values[:-1] = np.where(cont[:-1], values[1:], next_values[:-1])
    for lam in (0.0, 0.95, 1.0):
        adv, vs = compute_vtrace(rewards, values, next_values, np.zeros_like(values), terminated, truncated,
                                 0.99, lam)
        gae_adv, gae_ret = compute_gae(rewards, values, next_values, terminated, truncated, 0.99, lam)
        np.testing.assert_allclose(vs, gae_ret, rtol=1e-5, atol=1e-5)
        if lam == 1.0:  # A_t = r + γ v_{t+1} - V equals v_t - V(x_t) when every ρ and c is 1
            np.testing.assert_allclose(adv, gae_adv, rtol=1e-5, atol=1e-5)


def test_a_policy_that_would_never_take_these_actions_gets_no_correction():
    rng = np.random.default_rng(1)
    rewards, values, next_values, terminated, truncated = _rollout(rng)
    adv, vs = compute_vtrace(rewards, values, next_values, np.full(values.shape, -50.0), terminated, truncated, 0.99)
    np.testing.assert_allclose(vs, values, atol=1e-6)
    np.testing.assert_allclose(adv, 0.0, atol=1e-6)


def test_ratios_above_the_clip_count_as_the_clip():
    rng = np.random.default_rng(2)
    rewards, values, next_values, terminated, truncated = _rollout(rng)
    at_clip = compute_vtrace(rewards, values, next_values, np.zeros_like(values), terminated, truncated, 0.9)
    above = compute_vtrace(rewards, values, next_values, np.full(values.shape, 3.0), terminated, truncated, 0.9)
    for a, b in zip(at_clip, above):
        np.testing.assert_allclose(a, b, rtol=1e-6)


def test_two_steps_by_hand():
    # one env, two steps, no episode end; ρ_0 = 0.5, ρ_1 = 1; γ = 0.5, λ = 1
    r, v, nv = np.array([[1.0], [2.0]]), np.array([[0.0], [1.0]]), np.array([[1.0], [4.0]])
    log_rhos = np.log(np.array([[0.5], [1.0]]))
    no = np.zeros((2, 1), bool)
    adv, vs = compute_vtrace(r, v, nv, log_rhos, no, no, gamma=0.5)
    # δ_1 = 1*(2 + 0.5*4 - 1) = 3; v_1 = 1 + 3 = 4
    # δ_0 = 0.5*(1 + 0.5*1 - 0) = 0.75; v_0 = 0 + 0.75 + 0.5*0.5*(v_1 - V_1) = 0.75 + 0.25*3 = 1.5
    np.testing.assert_allclose(vs[:, 0], [1.5, 4.0])
    # A_0 = 0.5*(1 + 0.5*v_1 - 0) = 1.5; A_1 = 1*(2 + 0.5*4 - 1) = 3
    np.testing.assert_allclose(adv[:, 0], [1.5, 3.0])
