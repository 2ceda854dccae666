"""Load the name patterns: the shipped ``patterns.toml`` merged with a user's file."""
from __future__ import annotations

import functools
import os
import re
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

from ..errors import TraceVizError
from ..table.inputs import note_input


@dataclass(frozen=True)
class Patterns:
    """Compiled patterns; see ``patterns.toml`` for what each table means."""

    comm: tuple[re.Pattern, ...]
    memory: tuple[re.Pattern, ...]
    collectives: tuple[tuple[str, re.Pattern], ...]
    iteration: re.Pattern
    phases: dict[str, re.Pattern]
    comm_groups: tuple[tuple[str, re.Pattern], ...]
    kernel_groups: tuple[tuple[str, re.Pattern], ...]
    generic_pg_desc: re.Pattern
    coalesced: re.Pattern
    raw: dict


def _compile(text: str, where: str) -> re.Pattern:
    try:
        return re.compile(text)
    except re.error as exc:
        raise TraceVizError(f"{where}: bad regular expression {text!r}: {exc}") from None


@functools.lru_cache(maxsize=1)
def _shipped() -> Patterns:
    """The shipped patterns, read and compiled once a process (every parse asks for them:
    ~6 ms a trace, more than a small trace's parse)."""
    text = resources.files(__package__).joinpath("patterns.toml").read_text()
    return _patterns(tomllib.loads(text), "patterns.toml")


def load_patterns(path: str | os.PathLike | None = None) -> Patterns:
    """The default patterns, with the tables of ``path`` (a TOML file) replacing them."""
    if path is None:
        return _shipped()
    data = dict(_shipped().raw)  # its tables are replaced below, never changed in place
    where = str(path)
    note_input(path)
    try:
        user = tomllib.loads(Path(path).read_text())
    except OSError as exc:
        raise TraceVizError(f"{path}: cannot read patterns file: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise TraceVizError(f"{path}: not valid TOML: {exc}") from None
    for table, value in user.items():
        if isinstance(value, dict) and isinstance(data.get(table), dict):
            data[table] = {**data[table], **value}
        else:
            data[table] = value
    return _patterns(data, where)


def _patterns(data: dict, where: str) -> Patterns:
    """Compile the pattern tables ``data`` (read from ``where``, named in errors)."""
    try:
        kind = data["kind"]
        return Patterns(
            comm=tuple(_compile(p, where) for p in kind["communication"]),
            memory=tuple(_compile(p, where) for p in kind["memory"]),
            collectives=tuple((c["name"], _compile(c["pattern"], where))
                              for c in data["collective"]),
            iteration=_compile(data["steps"]["iteration"], where),
            phases={k: _compile(v, where) for k, v in data["phases"].items()},
            comm_groups=tuple((c["group"], _compile(c["pattern"], where))
                              for c in data["comm_group"]),
            kernel_groups=tuple((c["group"], _compile(c["pattern"], where))
                                for c in data.get("comm_group_by_kernel", [])),
            generic_pg_desc=_compile(data["process_groups"]["generic_description"], where),
            coalesced=_compile(data["coalesced"]["annotation"], where),
            raw=data,
        )
    except (KeyError, TypeError) as exc:
        raise TraceVizError(f"{where}: missing or malformed pattern table: {exc}") from None
