"""Imported once by the fork server that starts mp rollout workers (its preload), so every worker
forks with what it would otherwise import on its own after the fork.

The costly part is the first ``torch.optim`` optimizer of a process: it imports ``torch._dynamo``
(about 1 s of CPU, 95% of a worker's start-up when measured). Paid in each worker, two workers
starting on a loaded 2-core machine finished start-up seconds apart, and a short off-policy run
could end before the later one delivered a chunk. Nothing here may raise anything but ImportError
(which the fork server ignores): any other error would take the fork server down.
"""

from __future__ import annotations

import torch

import relayrl.runtime.rollout_worker  # noqa: F401  (the worker class, collectors, env registry)
from relayrl.algos import available

try:
    available()  # every algorithm module
    torch.optim.Adam([torch.nn.Parameter(torch.empty(1))])  # no kernel runs: only the imports
except Exception:  # pragma: no cover - a warm-up that fails only costs the workers time
    pass
