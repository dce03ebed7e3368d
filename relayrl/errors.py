"""User-facing errors: each names the problem and the fix, and the CLI prints it without a traceback."""

from __future__ import annotations


class RelayRLError(Exception):
    """Base class for mistakes a user can fix (bad config, missing file, wrong shape).

    The CLI catches these, prints ``str(error)`` on one line and exits with ``exit_code``.
    """

    exit_code = 1


class ConfigError(RelayRLError):
    """A configuration value, key or file is wrong."""

    exit_code = 2


class EnvError(RelayRLError):
    """An environment id, space or action does not fit what relayrl expects."""

    exit_code = 2


class CheckpointError(RelayRLError):
    """A checkpoint or run directory is missing, unreadable or incompatible."""

    exit_code = 2


class DatasetError(RelayRLError):
    """An offline dataset is missing, unreadable, or does not fit the env it is to be learned for."""

    exit_code = 2


class NonFiniteError(RelayRLError):
    """Training produced a NaN or infinite loss; the last good checkpoint is kept."""

    exit_code = 1


def install_hint(extra: str) -> str:
    """The command that installs one of relayrl's extras from a checkout, pinned to the tested versions
    (relayrl is not on PyPI)."""
    return f"python -m pip install -c constraints.txt -e '.[{extra}]'"
