"""Per-env transition streams of a vector env, for tests that compare a native manager (same-step autoreset)
with the library it wraps (NEXT_STEP autoreset: after an episode ends, one step that ignores its action and
returns the reset observation)."""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

Transition = tuple  # (obs, reward, terminated, truncated, next or final obs)
Act = Callable[[np.ndarray, np.ndarray], np.ndarray]  # (observations, per-env steps recorded so far) -> actions


def next_step_stream(raw: Any, obs: np.ndarray, steps: int, act: Act) -> list[list[Transition]]:
    """``steps`` steps of a NEXT_STEP vector env from ``obs`` (its reset observations), each env's dummy steps
    dropped."""
    n = len(obs)
    stream: list[list[Transition]] = [[] for _ in range(n)]
    dummy = np.zeros(n, bool)
    for _ in range(steps):
        nxt, reward, term, trunc, _ = raw.step(act(obs, np.array([len(s) for s in stream])))
        for k in range(n):
            if not dummy[k]:
                stream[k].append((obs[k].copy(), float(reward[k]), bool(term[k]), bool(trunc[k]), nxt[k].copy()))
        dummy, obs = term | trunc, nxt
    return stream


def same_step_stream(venv: Any, obs: np.ndarray, steps: int, act: Act) -> list[list[Transition]]:
    """``steps`` steps of a relayrl vector env from ``obs``; an episode's last transition ends in its final obs."""
    n = len(obs)
    stream: list[list[Transition]] = [[] for _ in range(n)]
    for t in range(steps):
        r = venv.step(act(obs, np.full(n, t)))
        for k in range(n):
            last = r.final_obs[k] if r.terminated[k] or r.truncated[k] else r.obs[k]
            stream[k].append((obs[k].copy(), float(r.reward[k]), bool(r.terminated[k]), bool(r.truncated[k]),
                              last.copy()))
        obs = r.obs
    return stream


def assert_same_streams(got: list[list[Transition]], expected: list[list[Transition]]) -> tuple[int, int]:
    """Every env's ``got`` equals the start of its ``expected``; returns (terminations, truncations) in ``got``."""
    terminations = truncations = 0
    for mine, theirs in zip(got, expected, strict=True):
        for a, b in zip(mine, theirs[:len(mine)], strict=True):
            np.testing.assert_array_equal(a[0], b[0])
            assert a[1:4] == b[1:4]
            np.testing.assert_array_equal(a[4], b[4])
            terminations += a[2]
            truncations += a[3]
    return terminations, truncations
