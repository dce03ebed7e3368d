"""Build the C bridge examples (``relayrl/bridge/c/examples/<name>.c`` + the C SDK) with the system
compiler: ``build("echo_sim", Path("/tmp/out"))`` returns the executable's path.

The compiler is ``$CC`` (may hold flags, e.g. ``CC="ccache gcc"``) or ``cc``. Warnings are errors,
so a clean build is part of the SDK's contract. A build is reused while it is newer than every
source file and was made with the same command line.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
from pathlib import Path

from relayrl.errors import RelayRLError

C_DIR = Path(__file__).resolve().parent / "c"
CFLAGS = ("-std=c11", "-O2", "-Wall", "-Wextra", "-Werror", "-D_POSIX_C_SOURCE=200809L", "-D_DEFAULT_SOURCE")
LIBS = ("-lm",)


class BuildError(RelayRLError):
    """The C example could not be compiled (no compiler, or the compiler failed)."""


def compiler() -> list[str]:
    """The compiler command: ``$CC`` split shell-style, else ``cc``; BuildError if it is not installed."""
    command = shlex.split(os.environ.get("CC", "") or "cc")
    if not command or shutil.which(command[0]) is None:
        raise BuildError(f"no C compiler: {command[0] if command else '$CC'!r} was not found on PATH; install one "
                         "(e.g. gcc or clang) or set CC to its path")
    return command


def have_compiler() -> bool:
    """Whether ``compiler()`` finds one (tests of the C SDK skip without it)."""
    try:
        compiler()
    except BuildError:
        return False
    return True


def sources(name: str) -> list[Path]:
    """The C files of example ``name``: the example itself, then the SDK."""
    example = C_DIR / "examples" / f"{name}.c"
    if not example.is_file():
        known = sorted(p.stem for p in (C_DIR / "examples").glob("*.c"))
        raise BuildError(f"no C example {name!r} in {C_DIR / 'examples'} (there are {known})")
    return [example, C_DIR / "relayrl_bridge.c"]


def build(name: str, out_dir: Path, *, extra_flags: tuple[str, ...] = ()) -> Path:
    """Compile example ``name`` into ``out_dir`` (created if needed) and return the executable."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    srcs = sources(name)
    exe = out_dir / name
    command = [*compiler(), *CFLAGS, *extra_flags, f"-I{C_DIR}", *map(str, srcs), "-o", str(exe), *LIBS]
    stamp = out_dir / f".{name}.cmd"
    inputs = [*srcs, C_DIR / "relayrl_bridge.h"]
    if (exe.is_file() and stamp.is_file() and stamp.read_text() == shlex.join(command)
            and exe.stat().st_mtime >= max(p.stat().st_mtime for p in inputs)):
        return exe
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=300)
    except OSError as exc:
        raise BuildError(f"cannot run the C compiler {command[0]!r}: {exc}") from None
    if result.returncode != 0:
        raise BuildError(f"compiling {name} with {command[0]!r} failed (exit {result.returncode}):\n"
                         f"$ {shlex.join(command)}\n{result.stderr.strip() or result.stdout.strip()}")
    stamp.write_text(shlex.join(command))
    return exe


__all__ = ["build", "BuildError", "compiler", "C_DIR", "CFLAGS"]
