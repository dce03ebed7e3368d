"""The run directory (DESIGN.md): config.yaml, metrics.jsonl, TensorBoard events, checkpoints/, summary.json."""

from __future__ import annotations

import fcntl
import json
import logging
import os
import re
import shlex
import shutil
import time
from pathlib import Path
from typing import Any

from relayrl.errors import CheckpointError
from relayrl.io.atomic import atomic_write_text, remove_stale_temps

log = logging.getLogger("relayrl")
LOCK_FILE = ".lock"

SUMMARY_KEYS = (
    "algo", "env", "seed", "backend", "env_steps", "updates", "wall_time_s", "env_steps_per_s",
    "best_eval_return", "last_eval_return", "stop_value", "solved",
    "time_to_stop_value_s", "env_steps_to_stop_value",
)


_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
NAME_PART_MAX = 60  # a bridge command can be long; the name only has to tell runs apart at a glance


def name_part(text: str) -> str:
    """``text`` as a piece of a folder name: runs of anything but ``[A-Za-z0-9._-]`` (``:``, ``/``, spaces
    of "pettingzoo:pkg:env_fn" or "bridge:python -m sim") become one ``-``; no leading dot or dash, and
    at most NAME_PART_MAX characters."""
    part = re.sub("-{2,}", "-", _UNSAFE.sub("-", text))[:NAME_PART_MAX].strip("-.")
    return part or "run"


def new_run_dir(env_id: str, algo: str, root: Path = Path("runs")) -> Path:
    """``runs/<env>_<algo>_<timestamp>``, in ``[A-Za-z0-9._-]``; a suffix keeps two runs started in one
    second apart."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    base = root / f"{name_part(env_id)}_{name_part(algo)}_{stamp}"
    path, k = base, 1
    while path.exists():
        path, k = Path(f"{base}-{k}"), k + 1
    return path


def check_fresh_run_dir(run_dir: Path) -> None:
    """Refuse to start a new run in a folder that already holds files (another run's metrics,
    checkpoints or summary would be mixed with or overwritten by this one's). A missing or empty folder
    is fine; so is one holding only the lock file of a run refused before it wrote anything."""
    run_dir = Path(run_dir)
    if not run_dir.exists():
        return
    if not run_dir.is_dir():
        raise CheckpointError(f"run directory {str(run_dir)!r} is a file: pass a folder to write the run in")
    held = sorted(p.name for p in run_dir.iterdir() if p.name != LOCK_FILE)
    if held:
        shown = ", ".join(held[:4]) + (f" and {len(held) - 4} more" if len(held) > 4 else "")
        raise CheckpointError(f"run directory {str(run_dir)!r} is not empty ({shown}): continue that run "
                              f"with --resume {shlex.quote(str(run_dir))} (resume=True in Python), or start a new "
                              "one in a fresh directory (another --run-dir, or none for runs/<env>_<algo>_<time>)")


def discard_new_run(run_dir: Path, remove_dir: bool) -> None:
    """Take back what a new run wrote in ``run_dir`` before it failed to start (call it holding the run's
    lock: ``check_fresh_run_dir`` found the folder empty, so everything there is this run's), and the
    folder itself if the run made it."""
    run_dir = Path(run_dir)
    for path in run_dir.iterdir():  # the lock file too: the run never was
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
    if remove_dir:
        try:
            run_dir.rmdir()
        except OSError:  # something appeared meanwhile: leave it
            pass


def write_summary(run_dir: Path, summary: dict[str, Any]) -> None:
    missing = [key for key in SUMMARY_KEYS if key not in summary]
    if missing:
        raise ValueError(f"summary lacks {missing}")
    atomic_write_text(Path(run_dir) / "summary.json", json.dumps(summary, indent=2) + "\n")


def read_summary(run_dir: Path) -> dict[str, Any]:
    return json.loads((Path(run_dir) / "summary.json").read_text())


BEHAVIOURS_DIR = "behaviours"  # RUN/behaviours/<name>/: each behaviour's run, in a run of several (training/behaviours.py)


def behaviour_names(run_dir: Path) -> list[str]:
    """The behaviours a run of several trained (none: a run of one policy)."""
    folder = Path(run_dir) / BEHAVIOURS_DIR
    return sorted(p.name for p in folder.iterdir() if p.is_dir()) if folder.is_dir() else []


def behaviour_run(path: Path | str, behaviour: str | None) -> Path:
    """Where behaviour ``behaviour``'s policy of ``path`` (a run directory or checkpoint) is: in a run of several
    behaviours, its run directory; else ``path`` itself (``check_behaviour`` then checks the name)."""
    path = Path(path)
    names = behaviour_names(path) if path.is_dir() else []
    if not names:
        return path
    if behaviour is None:
        raise CheckpointError(f"{str(path)!r} trained the behaviours {names}, a policy each: choose one with "
                              "--behaviour NAME (behaviour=NAME in Python)")
    if behaviour not in names:
        raise CheckpointError(f"{str(path)!r} has no behaviour {behaviour!r}; it trained {names}")
    return path / BEHAVIOURS_DIR / behaviour


def check_behaviour(meta: dict[str, Any], where: Path, behaviour: str | None) -> None:
    """Refuse ``behaviour`` for a checkpoint (``meta``) whose policy is another behaviour's, or no behaviour's."""
    if behaviour is None:
        return
    trained = ((meta.get("config") or {}).get("env") or {}).get("kwargs", {}).get("behaviour")
    if trained != behaviour:
        what = f"behaviour {trained!r}'s policy" if trained else "one policy, not a behaviour's of a simulator"
        raise CheckpointError(f"{str(where)!r} holds {what}: it has no behaviour {behaviour!r}; drop --behaviour "
                              "or pass the run of several behaviours")


EXPERIMENT_FILE = "experiment.txt"


def write_experiment_record(run_dir: Path, argv: list[str], changes: list[str], resumed: bool = False) -> Path:
    """Append to ``experiment.txt``, the human-readable record beside config.yaml (roadrunner's
    experiment.info, without its pickle): when, with what, the command line, and the options that
    differ from the defaults (or, on a resume, from the run's saved config)."""
    import platform
    import shlex

    import torch

    from relayrl.version import __version__

    path = Path(run_dir) / EXPERIMENT_FILE
    lines = [f"{'resumed' if resumed else 'started'} {time.strftime('%Y-%m-%d %H:%M:%S %Z')} on "
             f"{platform.node()}: relayrl {__version__}, python {platform.python_version()}, torch {torch.__version__}",
             f"command: {shlex.join(argv)}",
             ("options changed on resume:" if resumed else "options that differ from the defaults:")
             + ("" if changes else " none")]
    lines += [f"  {change}" for change in changes]
    previous = path.read_text() + "\n" if path.is_file() else ""
    atomic_write_text(path, previous + "\n".join(lines) + "\n")
    return path


class RunLock:
    """An exclusive lock on a run directory while a process trains in it (``flock`` on ``.lock``).

    The kernel drops the lock when its process dies, however it dies, so a free lock means no
    process is writing the run: a resume cannot collide with a live trainer, and the temp files a
    killed writer left behind are stale. ``acquire`` removes those (logging each one) and keeps
    their paths in ``removed``.
    """

    def __init__(self, run_dir: Path):
        self.run_dir = Path(run_dir)
        self.path = self.run_dir / LOCK_FILE
        self.removed: list[Path] = []
        self._fd: int | None = None

    def acquire(self) -> "RunLock":
        self.run_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o666)  # less the umask, as every file of the run
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
            os.close(fd)
            raise CheckpointError(f"run directory {str(self.run_dir)!r} is in use by another relayrl process "
                                  f"(pid {holder}): wait for it to stop, or use another run directory") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd
        self.removed = remove_stale_temps(self.run_dir) + remove_stale_temps(self.run_dir / "checkpoints")
        for path in self.removed:
            log.warning("removed %s, a temp file left by a run that was killed while writing", path)
        return self

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the descriptor releases the flock
            self._fd = None

    def __enter__(self) -> "RunLock":
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


def clean_stale_temps(run_dir: Path) -> list[Path]:
    """Remove the temp files a killed run left in ``run_dir`` and its checkpoints (saying which), unless
    a process is training there now or the folder is not ours to write."""
    try:
        with RunLock(run_dir) as lock:
            return lock.removed
    except (CheckpointError, OSError):
        return []
