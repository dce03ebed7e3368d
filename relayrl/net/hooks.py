"""User hooks named in a config as ``"package.module:function"`` (TMRL's sample compressor and the
memory's decompressor). The name is data in the user's own config; the module is imported from the
user's own code, never from anything received over the network."""

from __future__ import annotations

import importlib
from typing import Any, Callable

from relayrl.errors import ConfigError


def load_hook(spec: str | None, option: str) -> Callable[..., Any] | None:
    if spec is None:
        return None
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise ConfigError(f"{option}={spec!r}: expected 'package.module:function'")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(f"{option}={spec!r}: cannot import {module_name!r} ({exc}); is it on PYTHONPATH?") from None
    fn = getattr(module, attr, None)
    if not callable(fn):
        raise ConfigError(f"{option}={spec!r}: {module_name} has no function {attr!r}")
    return fn
