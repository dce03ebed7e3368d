"""relayrl: one set of RL algorithms for a laptop, a Ray cluster, remote robots and simulators.

``relayrl.train(algo, env, config)`` trains and returns the run; ``relayrl.load(run_or_checkpoint)``
returns its policy (``policy.predict(obs)``). The contracts (Policy, Algorithm, SampleSource) are in
``relayrl.core``; docs/library.md shows the whole Python API.
"""

from __future__ import annotations

from typing import Any

from relayrl.version import __version__
__all__ = ["train", "load", "Run", "__version__"]


def __getattr__(name: str) -> Any:  # imported on first use: `relayrl --version` stays instant
    if name in ("train", "load", "Run"):
        from relayrl import api

        return getattr(api, name)
    raise AttributeError(f"module 'relayrl' has no attribute {name!r}")
