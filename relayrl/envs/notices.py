"""What env libraries print on their own, once per run instead of once per env copy.

- ALE prints a banner (its version, "Powered by Stella") for every game it loads: its logger is set to
  warnings and errors only, so the banner never shows and real warnings still do.
- MuJoCo prints its warnings (e.g. a deprecated model attribute of Gymnasium's XML files) for every model
  it compiles, and appends them to ``MUJOCO_LOG.TXT`` in the working folder: they go to the ``relayrl``
  logger instead, each text once, and only from the run's main process (env and rollout worker
  processes build copies of the envs the main process already built, so they would only repeat it).
"""

from __future__ import annotations

import logging
import multiprocessing
from types import ModuleType

_mujoco_seen: set[str] | None = None  # texts shown by this process; None until the handler is installed


def quiet_ale(ale_py: ModuleType) -> None:
    """No banner per game: ALE's logger at warning level (``ale_py`` is the imported module)."""
    ale_py.ALEInterface.setLoggerMode(ale_py.LoggerMode.Warning)


def quiet_mujoco() -> None:
    """Route MuJoCo's warnings through ``_mujoco_warning`` (once per process; idempotent)."""
    global _mujoco_seen
    if _mujoco_seen is not None:
        return
    try:
        import mujoco
    except ImportError:  # not installed: making the env says which extra installs it
        return
    _mujoco_seen = set()
    mujoco.set_mju_user_warning(_mujoco_warning)


def _mujoco_warning(text: str) -> None:
    if _mujoco_seen is None or text in _mujoco_seen:
        return
    _mujoco_seen.add(text)
    if multiprocessing.parent_process() is None:  # the main process; workers repeat what it showed
        logging.getLogger("relayrl").warning("MuJoCo warning (shown once): %s", text.strip())
