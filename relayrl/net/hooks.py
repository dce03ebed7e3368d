"""User hooks named in a config as ``"package.module:function"`` (TMRL's sample compressor and the
memory's decompressor). The name is data in the user's own config; the module is imported from the
user's own code, never from anything received over the network."""

from __future__ import annotations

from typing import Any, Callable

from relayrl.errors import ConfigError
from relayrl.usercode import import_module


def load_hook(spec: str | None, option: str) -> Callable[..., Any] | None:
    if spec is None:
        return None
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise ConfigError(f"{option}={spec!r}: expected 'package.module:function'")
    module = import_module(module_name, f"{option}={spec!r}")
    fn = getattr(module, attr, None)
    if not callable(fn):
        raise ConfigError(f"{option}={spec!r}: {module_name} has no function {attr!r}")
    return fn
