"""Configs of every command: one documented dataclass, YAML files and command-line flags.

    @dataclass
    class JudgeConfig:
        min_score: float | None = knob(None, "Reject records scored below this.")
        rubric: str = knob("default", "Which rubric.", choices=("default", "strict"))
        attempts: int = knob(3, "Tries per record.", minimum=1)

A field is a flag of its command (`min_score` -> `--min-score`; a bool `--x/--no-x`; a list takes
comma-separated values; a mapping JSON or YAML), its help text is the field's `help`; `minimum`/`maximum`
bound a number (a flag out of range is a usage error). Precedence:
dataclass defaults < `--config FILE` (YAML) < flags. A bad value fails before any work starts,
naming the field (`ConfigError`). A config class may define `validate()` for checks across fields.
"""

from __future__ import annotations

import dataclasses
import os
import types
import typing
from collections.abc import Callable, Iterable
from dataclasses import field
from pathlib import Path
from typing import Any

import click


class ConfigError(ValueError):
    """A config that cannot be used; names the field (and the file it came from)."""


def knob(default: Any, help: str, *, choices: Iterable[str] | None = None, flag: str | None = None,  # noqa: A002
         short: str | None = None, minimum: float | None = None, maximum: float | None = None, path: bool = False,
         **kwargs: Any) -> Any:
    """A config field with its documentation (and, optionally, its allowed values, its bounds (inclusive; a
    flag out of them is a usage error, a file's value a ConfigError), its own flag name or a one-letter short
    flag: `short="n"` is `-n`). `path`: the value is a file or directory path (or a list of them), whose `~` is
    the user's home wherever it was given (no shell expands it in a YAML config)."""
    metadata: dict[str, Any] = {"help": help}
    if path:
        metadata["path"] = True
    if choices is not None:
        metadata["choices"] = tuple(choices)
    if minimum is not None or maximum is not None:
        metadata["range"] = (minimum, maximum)
    if flag is not None:
        metadata["flag"] = flag
    if short is not None:
        metadata["short"] = short
    if isinstance(default, (list, dict)):
        return field(default_factory=lambda: type(default)(default), metadata=metadata, **kwargs)
    return field(default=default, metadata=metadata, **kwargs)


def check(ok: bool, name: str, message: str) -> None:
    """Raise a ConfigError naming the field unless `ok` (for `validate()` methods)."""
    if not ok:
        raise ConfigError(f"config field {name}: {message}")


# -- loading --------------------------------------------------------------------------------------

def field_types(cls: type) -> dict[str, Any]:
    hints = typing.get_type_hints(cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls)}


def _base_type(hint: Any) -> Any:
    """`int | None` -> int; list[str] stays list[str]."""
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        return args[0]
    return hint


def _nullable(hint: Any) -> bool:
    return (isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union) \
        and type(None) in typing.get_args(hint)


def coerce(name: str, hint: Any, value: Any) -> Any:
    """`value` (from YAML or a flag) as the field's type, or a ConfigError naming the field."""
    if value is None:
        if _nullable(hint):
            return None
        raise ConfigError(f"config field {name}: may not be null")
    base = _base_type(hint)
    if base is dict or typing.get_origin(base) is dict:
        if isinstance(value, str):
            import yaml

            try:
                value = yaml.safe_load(value)
            except yaml.YAMLError as exc:
                raise ConfigError(f"config field {name}: not a JSON/YAML mapping: {exc}") from exc
        if not isinstance(value, dict):
            raise ConfigError(f"config field {name}: expected a mapping, got {value!r}")
        return value
    if typing.get_origin(base) is list:
        if isinstance(value, tuple):  # a repeatable flag: each value may hold several, comma-separated
            value = ",".join(value)
        if isinstance(value, str):
            value = [v for v in (s.strip() for s in value.split(",")) if v]
        if not isinstance(value, list):
            raise ConfigError(f"config field {name}: expected a list, got {value!r}")
        return [str(v) for v in value]
    if base is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false", "1", "0", "yes", "no"):
            return value.lower() in ("true", "1", "yes")
        raise ConfigError(f"config field {name}: expected true or false, got {value!r}")
    if base is float and isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if base is int and isinstance(value, int) and not isinstance(value, bool):
        return value
    if base is str and isinstance(value, str):
        return value
    if isinstance(value, str) and base in (int, float):
        try:
            return base(value)
        except ValueError:
            pass
    raise ConfigError(f"config field {name}: expected {getattr(base, '__name__', base)}, got {value!r}")


def read_yaml(path: str | Path, cls: type) -> dict[str, Any]:
    """The fields a YAML config file sets, typed; unknown fields are errors naming the file."""
    import yaml

    try:
        loaded = yaml.safe_load(Path(path).read_text()) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"{path}: cannot read the config file: {exc}") from exc
    if not isinstance(loaded, dict):
        raise ConfigError(f"{path}: a config file is a mapping of field: value")
    hints = field_types(cls)
    values = {}
    for key, value in loaded.items():
        if key not in hints:
            raise ConfigError(f"{path}: {_unknown_field(key, hints, cls)}")
        try:
            values[key] = coerce(key, hints[key], value)
        except ConfigError as exc:
            raise ConfigError(f"{path}: {exc}") from None
    return values


def _unknown_field(key: Any, fields: dict[str, Any], cls: type) -> str:
    """The message for a field `cls` does not have, naming the nearest one (a misspelling, `-` for `_`)."""
    import difflib

    wanted = str(key).replace("-", "_")
    nearest = [wanted] if wanted in fields else difflib.get_close_matches(wanted, list(fields), n=1, cutoff=0.75)
    hint = f" (did you mean {nearest[0]!r}?)" if nearest else ""
    return f"unknown config field {key!r} for {cls.__name__}{hint}"


def find_config(value: str, bundled: Path) -> str:
    """A config file's path: `value` itself, or the name of a file in `bundled` (e.g. `grpo_paper.yaml`)."""
    if Path(value).exists():
        return value
    if (bundled / value).is_file():
        return str(bundled / value)
    names = ", ".join(p.name for p in sorted(bundled.glob("*.yaml")))
    raise ConfigError(f"no such config file {value!r} (bundled: {names})")


def load_config[C](cls: type[C], path: str | Path | None = None, overrides: dict[str, Any] | None = None) -> C:
    """Defaults, then the YAML file, then `overrides` (None values are ignored); checked."""
    hints = field_types(cls)
    values = read_yaml(path, cls) if path is not None else {}
    for key, value in (overrides or {}).items():
        if value is None:
            continue
        if key not in hints:
            raise ConfigError(_unknown_field(key, hints, cls))
        values[key] = coerce(key, hints[key], value)
    _expand_home(cls, values)
    try:
        config = cls(**values)
    except (TypeError, ValueError) as exc:  # checks a config class makes itself (__post_init__)
        raise ConfigError(f"{cls.__name__}: {exc}") from exc
    check_knobs(config)
    if hasattr(config, "validate"):
        config.validate()
    return config


def _expand_home(cls: type, values: dict[str, Any]) -> None:
    """`~` and `~user` at the start of the path knobs' values, as a shell expands them."""
    for spec in dataclasses.fields(cls):
        value = values.get(spec.name)
        if not spec.metadata.get("path") or value is None:
            continue
        values[spec.name] = ([os.path.expanduser(v) for v in value] if isinstance(value, list)
                             else os.path.expanduser(value))


def check_knobs(config: Any) -> None:
    """Raise a ConfigError naming the first knob whose value is not among its choices or out of its bounds (the
    flags check them too; a config built in code, e.g. in a dataclass's __post_init__, calls this)."""
    for spec in dataclasses.fields(config):
        value = getattr(config, spec.name)
        allowed = spec.metadata.get("choices")
        if allowed and value is not None and value not in allowed:
            raise ConfigError(f"config field {spec.name}: must be one of {' | '.join(allowed)}, got {value!r}")
        if "range" in spec.metadata and value is not None and not _in_range(value, spec.metadata["range"]):
            raise ConfigError(f"config field {spec.name}: must be {_range_text(spec.metadata['range'])}, got {value!r}")


def _in_range(value: Any, bounds: tuple) -> bool:
    low, high = bounds
    values = value if isinstance(value, list | tuple) else [value]
    return all((low is None or v >= low) and (high is None or v <= high) for v in values)


def _range_text(bounds: tuple) -> str:
    low, high = bounds
    if low is not None and high is not None:
        return f"between {low:g} and {high:g}"
    return f">= {low:g}" if low is not None else f"<= {high:g}"


def to_dict(config: Any) -> dict[str, Any]:
    return dataclasses.asdict(config)


def save_config(config: Any, path: str | Path) -> None:
    import yaml

    Path(path).write_text(yaml.safe_dump(to_dict(config), sort_keys=False))


# -- flags ----------------------------------------------------------------------------------------

# A config flag's click name: prefixed, so a field never collides with a command's own options
# (an EmulatorConfig.max_tokens behind --emulator-max-tokens must not swallow the LLM's --max-tokens).
DEST_PREFIX = "cfg__"


def flag_name(spec: dataclasses.Field) -> str:
    return spec.metadata.get("flag") or spec.name.replace("_", "-")


def config_options(cls: type, only: Iterable[str] | None = None, exclude: Iterable[str] = ()) -> Callable:
    """Click options for the knob() fields of `cls` (all, `only` these, or all but `exclude`). An unset flag
    is None, so it does not override the YAML file."""
    hints = field_types(cls)
    only, exclude = (set(only) if only is not None else None), set(exclude)

    def decorate(f: Callable) -> Callable:
        for spec in reversed(dataclasses.fields(cls)):
            if (only is not None and spec.name not in only) or spec.name in exclude or "help" not in spec.metadata:
                continue  # a field that is not a knob() is set by code, not by flags
            f = _option(spec, _base_type(hints[spec.name]))(f)
        return f

    return decorate


def _option(spec: dataclasses.Field, hint: Any) -> Callable:
    flag = flag_name(spec)
    default = spec.default if spec.default is not dataclasses.MISSING else spec.default_factory()
    bounds = f"; {_range_text(spec.metadata['range'])}" if "range" in spec.metadata else ""
    help_text = f"{spec.metadata.get('help', '')} [default: {default}{bounds}]"
    names = [f"--{flag}"] + ([f"-{spec.metadata['short']}"] if spec.metadata.get("short") else [])
    dest = DEST_PREFIX + spec.name
    if hint is bool:
        return click.option(f"--{flag}/--no-{flag}", dest, default=None, help=help_text)
    if typing.get_origin(hint) is list:
        return click.option(*names, dest, multiple=True, default=None,
                            help=help_text + " (repeatable, or comma-separated)")
    if hint is dict or typing.get_origin(hint) is dict:
        return click.option(*names, dest, type=str, default=None, help=help_text + " (JSON or YAML)")
    if spec.metadata.get("choices"):
        return click.option(*names, dest, type=click.Choice(spec.metadata["choices"]), default=None,
                            help=help_text)
    if "range" in spec.metadata:
        return click.option(*names, dest, type=hint, default=None, help=help_text,
                            callback=_bounded(spec.metadata["range"]))
    return click.option(*names, dest, type=hint, default=None, help=help_text)


def _bounded(bounds: tuple) -> Callable:
    """A flag's check against its knob's bounds: out of them is a usage error naming the flag."""
    def check(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
        if value is not None and not _in_range(value, bounds):
            raise click.BadParameter(f"must be {_range_text(bounds)}, got {value}")
        return value

    return check


def pop_values(cls: type, kwargs: dict[str, Any]) -> dict[str, Any]:
    """The config fields among a command's kwargs (removed from kwargs); an unused repeatable flag is None."""
    values = {f.name: kwargs.pop(DEST_PREFIX + f.name) for f in dataclasses.fields(cls) if DEST_PREFIX + f.name in kwargs}
    return {name: (None if value == () else value) for name, value in values.items()}
