"""A sampled-batch hook (``<algo>.sample_transform: "module:function"``): ``function(batch) -> batch``, applied on
the learner to every minibatch sampled from replay before the update (DrQ's random shift of image observations:
relayrl.data.augment:random_shift).

``SampleTransform(reference, what)`` imports the function before the run writes anything (not importable, not
callable: a ConfigError) and, with Box observations, checks it on transitions drawn from the spaces
(``check``); its first call in training is checked too: the result must be a Batch of the same columns, shapes and
dtypes (a ConfigError naming the function, the column and the shapes). The config records the reference, so a
checkpoint and ``--resume`` import it again, as they do ``encoder``.
"""

from __future__ import annotations

from typing import Any, Callable

from relayrl.data.replay.custom import check_batch
from relayrl.errors import ConfigError, RelayRLError
from relayrl.types import Batch
from relayrl.usercode import describe, load_object


class SampleTransform:
    def __init__(self, reference: str, what: str):
        self.what = f"{what} {reference!r}"
        fn = load_object(reference, self.what)
        if not callable(fn):
            raise ConfigError(f"{self.what} is {fn!r}, not callable: name a function batch -> batch")
        self.fn: Callable[[Batch], Any] = fn
        self.checked = False

    def __call__(self, batch: Batch) -> Batch:
        if self.checked:
            return self._call(batch)
        out = self.check(batch, "a sampled batch")
        self.checked = True
        return out

    def check(self, batch: Batch, what: str) -> Batch:
        """The function's result on ``batch``, checked (module docstring)."""
        out = self._call(dict(batch))  # (a shallow copy: the columns given are kept to compare)
        n = len(next(iter(batch.values())))
        check_batch(batch, out, n, f"{self.what} (the sampled-batch hook) on {what}", exact_keys=True)
        return out

    def _call(self, batch: Batch) -> Any:
        try:
            return self.fn(batch)
        except RelayRLError:
            raise
        except Exception as exc:  # noqa: BLE001 - user code may raise anything; one line naming it
            raise ConfigError(f"{self.what} raised {describe(exc)} on a sampled batch: fix the function") from None
