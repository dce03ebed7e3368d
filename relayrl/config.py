"""Typed run configuration: per-algorithm defaults, overridden by a YAML file, overridden by --set.

The sections themselves are in relayrl/options.py (which knows no algorithm); this module adds the
algorithm's section from the registry (``config_model``), merges defaults, YAML data and ``--set``
items, validates them into one error line per problem, and prints a config back as YAML. A typo is an
error with a close-match suggestion, never a silently ignored value.

``AlgoConfig`` and ``ReplayLoopConfig`` (the bases of your own algorithm's section) and ``RunConfig``
are importable from here too, as docs/library.md shows.
"""

from __future__ import annotations

import copy
import difflib
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, Field, ValidationError, create_model

from relayrl.algos import get_algo
from relayrl.errors import ConfigError
from relayrl.options import AlgoConfig, ReplayLoopConfig, RunConfig, Section

__all__ = ["AlgoConfig", "ReplayLoopConfig", "RunConfig", "build_config", "config_model", "default_config",
           "deep_merge", "diff_configs", "format_validation_error", "parse_set", "read_yaml", "save_config",
           "set_path", "to_yaml", "validate"]


_MODELS: dict[str, type[RunConfig]] = {}


def config_model(algo: str) -> type[RunConfig]:
    """The RunConfig subclass for ``algo``: the common options plus the algorithm's section, named as it
    registered (``ppo``; ``reinforce`` for your own ``"package.module:reinforce"``)."""
    if algo not in _MODELS:
        entry = get_algo(algo)
        _MODELS[algo] = create_model(
            f"{entry.name.upper()}RunConfig",
            __base__=RunConfig,
            **{entry.name: (entry.config_cls, Field(default_factory=entry.config_cls))},
        )
    return _MODELS[algo]


def default_config(algo: str) -> RunConfig:
    """The algorithm's defaults, including its overrides of the common options."""
    return config_model(algo).model_validate(deep_merge({"algo": algo}, get_algo(algo).defaults))


# ---------------------------------------------------------------- merging and parsing


def parse_set(item: str) -> tuple[list[str], Any]:
    """Parse one ``--set key.path=value``; the value is YAML data (``1e-3`` reads as a float)."""
    key, sep, raw = item.partition("=")
    if not sep or not key.strip():
        raise ConfigError(f"--set {item!r}: expected key=value, e.g. --set ppo.epochs=10")
    try:
        value = yaml.safe_load(raw) if raw.strip() else None
    except yaml.YAMLError:
        value = raw
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            pass
    return [part for part in key.strip().split(".")], value


def set_path(tree: dict[str, Any], path: list[str], value: Any) -> None:
    node = tree
    for depth, part in enumerate(path[:-1]):
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            where = ".".join(path[: depth + 1])
            raise ConfigError(f"--set {'.'.join(path)}: {where} is a value, not a section")
        node = child
    node[path[-1]] = value


def deep_merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """Recursively merge ``override`` into a copy of ``base``; the override wins."""
    out = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict) and key != "kwargs":
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = value
    return out


def read_yaml(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config file {str(path)!r} not found: pass an existing YAML file to --config")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise ConfigError(f"config file {str(path)!r} is not valid YAML: {_yaml_problem(exc)}; fix it there") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"config file {str(path)!r} must hold a mapping of options, got {type(data).__name__}")
    return data


def _yaml_problem(exc: yaml.YAMLError) -> str:
    """PyYAML's error as one line that points into the file: ``line 3, column 4: expected ...``."""
    if isinstance(exc, yaml.MarkedYAMLError) and exc.problem_mark is not None:
        mark = exc.problem_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}: {exc.problem or 'syntax error'}"
        if exc.context and exc.context_mark is not None:
            where += f" ({exc.context} at line {exc.context_mark.line + 1}, column {exc.context_mark.column + 1})"
        return where
    return " ".join(str(exc).split())


def build_config(
    algo: str,
    file_data: dict[str, Any] | None = None,
    sets: list[str] | tuple[str, ...] = (),
    overrides: dict[str, Any] | None = None,
) -> RunConfig:
    """Defaults for ``algo``, then the YAML data, then ``--set`` items, then CLI ``overrides``."""
    tree: dict[str, Any] = default_config(algo).model_dump()
    file_data = copy.deepcopy(dict(file_data or {}))  # (--set writes into the tree, never into the caller's data)
    file_algo = file_data.pop("algo", algo)
    if file_algo != algo:
        raise ConfigError(f"the config file is for algo {file_algo!r} but you asked to train {algo!r}: "
                          f"use `relayrl train {file_algo}` or `relayrl config {algo}` for a matching file")
    dotted = {key: file_data.pop(key) for key in [key for key in file_data if "." in key]}  # ("dqn.n_step": 1, as
    tree = deep_merge(tree, file_data)  # --set spells it, beside the nested layout {"dqn": {"n_step": 1}})
    for key, value in dotted.items():
        set_path(tree, key.split("."), value)
    for item in sets:
        path, value = parse_set(item)
        set_path(tree, path, value)
    for key, value in (overrides or {}).items():
        if value is not None:
            set_path(tree, key.split("."), value)
    return validate(algo, tree)


def validate(algo: str, tree: dict[str, Any]) -> RunConfig:
    model = config_model(algo)
    try:
        return model.model_validate(tree)
    except ValidationError as exc:
        raise ConfigError(format_validation_error(exc, model)) from None


def format_validation_error(exc: ValidationError, model: type[BaseModel]) -> str:
    """One line per problem: the key, the value given and what is expected."""
    lines = []
    for err in exc.errors():
        loc = [str(part) for part in err["loc"]]
        key = ".".join(loc)
        if err["type"] == "extra_forbidden":
            section = _section(model, loc[:-1])
            allowed = list(section.model_fields) if section else []
            prefix = "".join(f"{part}." for part in loc[:-1])
            targets = _close_keys(loc[-1], section, prefix) if section else []
            if not targets and section:  # e.g. a top-level learning_rate that belongs in ppo:
                targets = [t for name, sub in _subsections(section) for t in _close_keys(loc[-1], sub, f"{prefix}{name}.")]
            if targets:
                hint = "did you mean " + " or ".join(map(repr, targets)) + "?"
            else:
                hint = f"valid keys here: {', '.join(sorted(allowed))}"
            lines.append(f"unknown config key {key!r}: {hint}")
        else:
            lines.append(f"config key {key!r} = {err.get('input')!r}: {err['msg']}")
    return "config error: " + "; ".join(lines)


def _close_keys(key: str, section: type[Section], prefix: str) -> list[str]:
    """The dotted keys of ``section`` that ``key`` most likely meant (a close name or a known alias)."""
    names = list(section.model_fields) + list(section.aliases)
    close = difflib.get_close_matches(key, names, n=1, cutoff=0.6)
    if not close:
        return []
    return [prefix + t for t in section.aliases.get(close[0], close[0]).split(",")]


def _subsections(section: type[BaseModel]) -> list[tuple[str, type[Section]]]:
    return [(name, field.annotation) for name, field in section.model_fields.items()
            if isinstance(field.annotation, type) and issubclass(field.annotation, Section)]


def _section(model: type[BaseModel], path: list[str]) -> type[Section] | None:
    for part in path:
        field = model.model_fields.get(part)
        annotation = getattr(field, "annotation", None)
        if not (isinstance(annotation, type) and issubclass(annotation, BaseModel)):
            return None
        model = annotation
    return model  # type: ignore[return-value]


# ---------------------------------------------------------------- output


def to_yaml(config: BaseModel, comments: bool = True) -> str:
    """The config as YAML that ``--config`` accepts back; field docstrings become comments."""
    lines: list[str] = []
    _emit(config, lines, indent=0, comments=comments)
    return "\n".join(lines) + "\n"


def _emit(model: BaseModel, lines: list[str], indent: int, comments: bool) -> None:
    pad = "  " * indent
    for name, field in type(model).model_fields.items():
        value = getattr(model, name)
        if comments and field.description and not isinstance(value, BaseModel):
            lines.extend(f"{pad}# {line.strip()}" for line in field.description.splitlines())
        if isinstance(value, BaseModel):
            lines.append(f"{pad}{name}:")
            _emit(value, lines, indent + 1, comments)
        else:
            dumped = yaml.safe_dump({name: value}, default_flow_style=True, width=10_000).strip()
            if dumped.startswith("{") and dumped.endswith("}"):
                dumped = dumped[1:-1]
            lines.append(f"{pad}{dumped}")


def save_config(config: BaseModel, path: Path) -> None:
    from relayrl.io.atomic import atomic_write_text

    atomic_write_text(path, to_yaml(config))


def diff_configs(old: BaseModel, new: BaseModel) -> list[str]:
    """Human-readable list of options whose value differs, e.g. ``ppo.epochs: 10 -> 4``."""
    changes: list[str] = []

    def walk(a: Any, b: Any, prefix: str) -> None:
        if isinstance(a, dict) and isinstance(b, dict):
            for key in sorted(set(a) | set(b)):
                walk(a.get(key), b.get(key), f"{prefix}{key}.")
        elif a != b:
            changes.append(f"{prefix[:-1]}: {a!r} -> {b!r}")

    walk(old.model_dump(), new.model_dump(), "")
    return changes
