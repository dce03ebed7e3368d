"""User code named by reference (``"package.module:name"`` envs, algorithms, network factories, hooks).

The command line imports such modules from the working folder first, as ``python -m`` does
(``add_working_folder``); worker processes inherit the path (multiprocessing hands ``sys.path`` to the
processes it spawns and to its fork server; Ray adds the driver's working folder to its workers' path).
A module that does not import is one message naming the module, the folder searched and the fix; an
exception in user code is described by its last line and the innermost frame of the user's own code.
"""

from __future__ import annotations

import importlib
import inspect
import os
import sys
import sysconfig
import traceback
from pathlib import Path
from types import ModuleType

from relayrl.errors import ConfigError, RelayRLError, install_hint

# Packages that relayrl's extras install, by the module name an import error reports.
EXTRA_OF = {"mpe2": "mpe", "pymunk": "butterfly", "mujoco": "mujoco", "ale_py": "atari", "cv2": "atari",
            "minatar": "minatar", "pettingzoo": "multiagent", "envpool": "envpool", "ray": "ray"}

_LIBRARY_DIRS = tuple({str(Path(p).resolve()) for key in ("stdlib", "platstdlib", "purelib", "platlib")
                       if (p := sysconfig.get_paths().get(key))} | {str(Path(__file__).resolve().parent)})


def add_working_folder() -> None:
    """Put the working folder first on ``sys.path`` (once), as ``python -m`` does."""
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.insert(0, cwd)


def _searched() -> str:
    cwd = os.getcwd()
    if cwd in sys.path or "" in sys.path:
        return f"in the working folder {cwd} or on the Python path"
    return f"on the Python path (the working folder {cwd} is not on it)"


def import_module(name: str, what: str, error: type[RelayRLError] = ConfigError) -> ModuleType:
    """``importlib.import_module(name)``, or ``error`` with one line: ``what`` (e.g. ``env 'mymod:make'``),
    the module, where it was looked for, and the fix. Errors of relayrl's own pass through."""
    try:
        try:
            return importlib.import_module(name)
        except ModuleNotFoundError:  # a module written since this process last looked
            importlib.invalidate_caches()
            return importlib.import_module(name)
    except RelayRLError:
        raise
    except Exception as exc:  # noqa: BLE001 - importing user code may raise anything; report it on one line
        if name.startswith("pettingzoo.mpe."):  # (PettingZoo's own message asks for an unpinned pip install)
            raise error(f"{what}: cannot import module {name!r}: PettingZoo's MPE envs moved to the mpe2 package: "
                        f"install relayrl's mpe extra, {install_hint('mpe')}, and name the module "
                        f"mpe2.{name.rpartition('.')[2]}") from None
        raise error(f"{what}: cannot import module {name!r} ({_one_line(exc)}): {_import_fix(name, exc)}") from None


def _one_line(exc: BaseException) -> str:
    return " ".join(f"{type(exc).__name__}: {exc}".split())


def _import_fix(module: str, exc: Exception) -> str:
    """What to do about ``exc`` raised by importing ``module``, with where in the user's files it was raised."""
    if isinstance(exc, ModuleNotFoundError) and exc.name and (module == exc.name or module.startswith(exc.name + ".")):
        top = module.split(".")[0]
        return (f"no {top}.py (nor {top}/ package) {_searched()}: run relayrl from the folder that holds it, add "
                "that folder to PYTHONPATH, or pip install the package that provides it")
    if isinstance(exc, ModuleNotFoundError) and exc.name:  # the module imports something not installed
        extra = EXTRA_OF.get(exc.name.split(".")[0])
        fix = f"install relayrl's {extra} extra, {install_hint(extra)}" if extra else f"install {exc.name!r}"
        return f"{fix} (imported at {user_frame(exc)})"
    if isinstance(exc, SyntaxError):
        return f"fix the module at {exc.filename}:{exc.lineno}"
    return f"fix the module at {user_frame(exc)}"


def _library(filename: str) -> bool:
    if filename.startswith("<"):
        return True
    path = str(Path(filename).resolve())
    return path.startswith(_LIBRARY_DIRS)


def user_frame(exc: BaseException) -> str:
    """``FILE:LINE in FUNCTION`` of the innermost frame of user code in ``exc``'s traceback (the innermost
    frame when all are library code), or ``"?"`` without a traceback."""
    frames = traceback.extract_tb(exc.__traceback__)
    if not frames:
        return "?"
    frame = ([f for f in frames if not _library(f.filename)] or frames)[-1]
    return f"{frame.filename}:{frame.lineno} in {frame.name}"


def where(exc: BaseException) -> str:
    """`` (at FILE:LINE in FUNCTION)`` (``user_frame``), or ``""`` without a traceback."""
    return f" (at {user_frame(exc)})" if exc.__traceback__ is not None else ""


def describe(exc: BaseException) -> str:
    """``RuntimeError: no licence (at /home/me/sim.py:12 in make_env)``: the exception and where."""
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}{': ' + text if text else ''}{where(exc)}"


def defined_at(function: object) -> str:
    """``FILE:LINE`` where a function or method is defined, or its qualified name when there is no source."""
    try:
        lines = inspect.getsourcelines(function)  # type: ignore[arg-type]
        return f"{inspect.getsourcefile(function)}:{lines[1]}"  # type: ignore[arg-type]
    except (OSError, TypeError):
        return getattr(function, "__qualname__", repr(function))


def load_object(reference: str, what: str) -> object:
    """The object ``"package.module:name"`` names, imported with ``import_module``; a ConfigError starting
    with ``what`` (e.g. ``dqn.replay 'mymem:Memory'``) when the reference is malformed or the module has no
    such name."""
    module_name, sep, name = reference.partition(":")
    parts = module_name.split(".")
    if not sep or not module_name or not name.isidentifier() or not all(p.isidentifier() for p in parts):
        raise ConfigError(f"{what}: expected \"package.module:name\"")
    module = import_module(module_name, what)
    if not hasattr(module, name):
        import difflib

        close = difflib.get_close_matches(name, [n for n in vars(module) if not n.startswith("_")], n=1)
        hint = f"did you mean {module_name}:{close[0]}?" if close else "name one it defines"
        raise ConfigError(f"{what}: module {module_name!r} ({getattr(module, '__file__', '?')}) has no {name!r}: "
                          f"{hint}")
    return getattr(module, name)
