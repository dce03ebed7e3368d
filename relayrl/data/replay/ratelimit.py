"""A samples-per-insert rate limiter between the collectors and the learner (Reverb's SampleToInsertRatio).

Samples count sampled rows (updates x batch_size), inserts count transitions stored. The limiter keeps

    diff = samples_per_insert * (inserted - min_size) - sampled

within ``[-error_buffer, +error_buffer]``, as Reverb does: the learner may run an update (``batch`` rows)
only while ``diff - batch >= -error_buffer``, and collectors may insert a row only while
``diff + samples_per_insert <= error_buffer`` (``insertable``: a chunk is stored as far as the bound allows,
its other rows wait; transitions are independent rows). Whichever side is blocked waits for the other, and
neither can block for good exactly when ``2 * error_buffer >= batch + samples_per_insert``: when a row may
not be inserted, diff > error_buffer - samples_per_insert >= batch - error_buffer, so an update is allowed;
and the other way round. ``from_tolerance`` checks it.

The user sets ``samples_per_insert`` and a relative ``tolerance``; the error buffer is then
``tolerance * samples_per_insert * min_size`` samples (Acme's samples_per_insert_tolerance_rate), so
the SPI measured over the run, ``sampled / (inserted - min_size)``, stays within
``samples_per_insert * (1 +- tolerance)`` once as many transitions as
``min_size`` have been inserted past it, and converges to ``samples_per_insert``.

The limiter is pure bookkeeping: the training loop asks it (``updates_allowed``, ``insertable``) and tells
it (``inserted``/``sampled`` counts, ``wait``/``resume`` with the time).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from relayrl.errors import ConfigError


def _up(x: float) -> str:
    """``x`` rounded up to 3 significant digits (a bound the user can type and that suffices)."""
    digits = 2 - math.floor(math.log10(x)) if x > 0 else 0
    return f"{math.ceil(x * 10 ** digits - 1e-9) / 10 ** digits:g}"

SIDES = ("learner", "insert")


def limiter_bounds_problem(samples_per_insert: float, tolerance: float, min_size: int, batch: int,
                           name: str = "algo", shards: int = 1) -> str:
    """'' when the bounds can be met one update at a time, else what is wrong and the fix (for a ConfigError);
    ``name``: the algorithm's config section; ``shards``: replay shards sharing the bound (each holds inserts
    back on its own share, so each needs room for one row)."""
    if samples_per_insert <= 0:
        return f"{name}.samples_per_insert={samples_per_insert} must be > 0 (sampled rows per transition inserted)"
    if tolerance < 0:
        return f"{name}.spi_tolerance={tolerance} must be >= 0 (the relative slack around samples_per_insert)"
    error_buffer = tolerance * samples_per_insert * min_size
    need = batch + max(1, shards) * samples_per_insert  # room for one update and one row at every shard
    if 2 * error_buffer >= need:
        return ""
    fixes = []
    if min_size > 0:
        fixes.append(f"raise {name}.spi_tolerance to at least {_up(need / (2 * samples_per_insert * min_size))}")
    if tolerance > 0:
        start = math.ceil(need / (2 * samples_per_insert * tolerance))
        fixes.append(f"raise {name}.start_training to at least {start}")
    if 2 * error_buffer - samples_per_insert >= 1:
        fixes.append(f"lower {name}.batch_size to at most {math.floor(2 * error_buffer - samples_per_insert)}")
    if not fixes:
        fixes.append(f"set {name}.spi_tolerance > 0 and {name}.start_training > 0")
    return (f"{name}.samples_per_insert={samples_per_insert:g} with {name}.spi_tolerance={tolerance:g} and "
            f"{name}.start_training={min_size} lets the sampled rows stray only {error_buffer:g} either side of "
            f"samples_per_insert x inserts (spi_tolerance x samples_per_insert x start_training), less than half of "
            f"one update's {batch} rows ({name}.batch_size) plus one insert's {samples_per_insert:g}"
            + (f" at each of {shards} shards" if shards > 1 else "") + ": the learner "
            "and the collectors could each wait for the other forever: " + ", or ".join(fixes))


@dataclass
class RateLimiter:
    """The bound and its counters (module docstring); ``waits``/``wait_s``: per side, how often and how long it
    was held back."""

    samples_per_insert: float
    min_size: int  # transitions inserted before the learner samples at all (start_training)
    error_buffer: float  # samples either side of samples_per_insert x (inserted - min_size)
    inserted: int = 0
    sampled: int = 0
    waits: dict[str, int] = field(default_factory=lambda: {side: 0 for side in SIDES})
    wait_s: dict[str, float] = field(default_factory=lambda: {side: 0.0 for side in SIDES})
    _since: dict[str, float | None] = field(default_factory=lambda: {side: None for side in SIDES})

    @classmethod
    def from_tolerance(cls, samples_per_insert: float, tolerance: float, min_size: int, batch: int,
                       name: str = "algo", shards: int = 1) -> RateLimiter:
        """The limiter for ``samples_per_insert`` +- ``tolerance`` (relative); ConfigError if it can deadlock."""
        problem = limiter_bounds_problem(samples_per_insert, tolerance, min_size, batch, name, shards)
        if problem:
            raise ConfigError(problem)
        return cls(samples_per_insert, min_size, tolerance * samples_per_insert * min_size)

    def diff(self) -> float:
        return self.samples_per_insert * (self.inserted - self.min_size) - self.sampled

    def insertable(self, rows: int) -> int:
        """How many of ``rows`` transitions may be inserted now without leaving the bound."""
        room = (self.error_buffer - self.diff()) / self.samples_per_insert
        return max(0, min(rows, math.floor(room + 1e-9)))

    def can_insert(self) -> bool:
        return self.insertable(1) == 1

    def updates_allowed(self, batch: int) -> int:
        """Updates of ``batch`` rows the learner may run now without leaving the bound."""
        if self.inserted < self.min_size:
            return 0
        return max(0, math.floor((self.diff() + self.error_buffer) / batch))

    def insert(self, rows: int) -> None:
        self.inserted += rows

    def sample(self, rows: int) -> None:
        self.sampled += rows

    def wait(self, side: str, now: float) -> None:
        """``side`` ("learner" or "insert") is held back from ``now`` (counted once per wait)."""
        if self._since[side] is None:
            self._since[side], self.waits[side] = now, self.waits[side] + 1

    def resume(self, side: str, now: float) -> None:
        since = self._since[side]
        if since is not None:
            self.wait_s[side] += now - since
            self._since[side] = None

    def measured(self) -> float:
        """Samples per insert over the run so far, counted from ``min_size`` inserts (0 before)."""
        past = self.inserted - self.min_size
        return self.sampled / past if past > 0 else 0.0

    def stats(self, now: float) -> dict[str, float]:
        out = {"limiter/samples_per_insert": self.measured(), "limiter/diff": self.diff(),
               "limiter/error_buffer": self.error_buffer}
        for side in SIDES:
            since = self._since[side]
            out[f"limiter/{side}_waits"] = float(self.waits[side])
            out[f"limiter/{side}_wait_s"] = self.wait_s[side] + (now - since if since is not None else 0.0)
        return out

    def state(self) -> dict[str, int]:
        return {"inserted": self.inserted, "sampled": self.sampled}

    def restore(self, state: dict[str, int]) -> None:
        self.inserted, self.sampled = int(state.get("inserted", 0)), int(state.get("sampled", 0))
