"""The Learner: runs a ``LearningStep`` (training/rounds.py: the algorithm on-policy, ``ReplayUpdates``
off-policy) on each round's work between hooks at before_run / before_iter / after_iter / after_run.

Hooks get a small named ``HookContext``, never the loop's locals. Each hook has a priority (lower
runs first; ties keep registration order) and a frequency in iterations (for the *_iter positions).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Generic, TypeVar

from relayrl.training.rounds import LearningStep

W = TypeVar("W")

POSITIONS = ("before_run", "before_iter", "after_iter", "after_run")


@dataclass
class HookContext:
    env_steps: int = 0
    updates: int = 0
    iteration: int = 0
    metrics: dict[str, float] = field(default_factory=dict)
    stop_reason: str | None = None


@dataclass(frozen=True)
class Hook:
    name: str
    fn: Callable[[HookContext], None]
    priority: int
    freq: int


class Learner(Generic[W]):
    def __init__(self, algo: LearningStep[W], ctx: HookContext | None = None):
        """``algo``: what learns from each round's work (an ``Algorithm`` learns from a batch)."""
        self.algo = algo
        self.ctx = ctx or HookContext()
        self._hooks: dict[str, list[Hook]] = {p: [] for p in POSITIONS}

    def register_hook(self, position: str, fn: Callable[[HookContext], None], *, name: str | None = None,
                      priority: int = 100, freq: int = 1) -> None:
        if position not in self._hooks:
            raise ValueError(f"unknown hook position {position!r}: use one of {', '.join(POSITIONS)}")
        if freq < 1:
            raise ValueError(f"hook frequency must be >= 1, got {freq}")
        hooks = self._hooks[position]
        hooks.append(Hook(name or getattr(fn, "__name__", "hook"), fn, priority, freq))
        hooks.sort(key=lambda h: h.priority)  # stable: equal priorities keep registration order

    def call_hooks(self, position: str) -> None:
        for hook in self._hooks[position]:
            if position.endswith("_iter") and self.ctx.iteration % hook.freq:
                continue
            hook.fn(self.ctx)

    def learn(self, batch: W, progress: float = 0.0) -> dict[str, float]:
        """One iteration: before_iter hooks, ``algo.learn(batch)``, counters, after_iter hooks. ``batch``
        is the round's work (a ``Batch``, or ``UpdatesDue`` for ``ReplayUpdates``)."""
        self.ctx.iteration += 1
        self.call_hooks("before_iter")
        metrics = self.algo.learn(batch, progress=progress)
        self.ctx.updates += int(metrics.get("updates", 1))
        self.ctx.metrics = metrics
        self.call_hooks("after_iter")
        return metrics
