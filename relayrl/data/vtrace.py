"""V-trace targets (Espeholt et al., 2018, IMPALA) over a time-major rollout of N envs.

For data collected by a behaviour policy μ that lags the learner's π, with ρ_t = π/μ:

    δ_t = min(ρ̄, ρ_t) (r_t + γ V(x_{t+1}) - V(x_t))
    v_t = V(x_t) + δ_t + γ λ min(c̄, ρ_t) (v_{t+1} - V(x_{t+1}))      (cut at episode ends)
    A_t = min(ρ̄, ρ_t) (r_t + γ v_{t+1} - V(x_t))                      (policy-gradient advantage)

On-policy (ρ = 1) with c̄ ≥ 1, v_t - V(x_t) is exactly GAE(γ, λ), which the tests check.
``next_values`` follows ``compute_gae``'s convention (V of the observation after step t; bootstrap
where truncated; ignored where terminated).
"""

from __future__ import annotations

import numpy as np


def compute_vtrace(
    rewards: np.ndarray,
    values: np.ndarray,
    next_values: np.ndarray,
    log_rhos: np.ndarray,
    terminated: np.ndarray,
    truncated: np.ndarray,
    gamma: float,
    lam: float = 1.0,
    rho_clip: float = 1.0,
    c_clip: float = 1.0,
) -> tuple[np.ndarray, np.ndarray]:
    """Returns (policy-gradient advantages A_t, value targets v_t), both [T, N] float32."""
    rhos = np.exp(log_rhos.astype(np.float64))
    clipped_rhos = np.minimum(rho_clip, rhos)
    cs = lam * np.minimum(c_clip, rhos)
    not_terminal = 1.0 - terminated.astype(np.float64)
    not_done = 1.0 - (terminated | truncated).astype(np.float64)
    deltas = clipped_rhos * (rewards + gamma * not_terminal * next_values - values)
    corrections = np.zeros(values.shape, dtype=np.float64)  # v_t - V(x_t)
    running = np.zeros(values.shape[1:], dtype=np.float64)
    for t in range(len(rewards) - 1, -1, -1):
        running = deltas[t] + gamma * cs[t] * not_done[t] * running
        corrections[t] = running
    vs = values + corrections
    # v_{t+1}: the next step's target within an episode, else the bootstrap value (or 0 if terminal)
    vs_next = np.array(next_values, dtype=np.float64)
    vs_next[:-1] = np.where(not_done[:-1] > 0, vs[1:], next_values[:-1])
    advantages = clipped_rhos * (rewards + gamma * not_terminal * vs_next - values)
    return advantages.astype(np.float32), vs.astype(np.float32)
