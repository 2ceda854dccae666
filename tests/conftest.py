"""Shared test helpers: where the real traces are, and a skip when they are absent."""
from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"
TRACES = SHARED / "traces"
REFERENCE = SHARED / "reference"


def shared_traces() -> list[Path]:
    """Every trace file under ../shared/traces (empty when the folder is absent)."""
    if not TRACES.is_dir():
        return []
    return sorted(p for p in TRACES.rglob("*") if p.is_file() and ".json" in p.name)


def trace_id(path: Path) -> str:
    return str(path.relative_to(TRACES))


needs_shared = pytest.mark.skipif(
    not TRACES.is_dir(),
    reason="../shared/traces is absent (real traces are only in the development checkout; "
           "CI always has them)")


def shared(path: str) -> Path:
    """A file under ../shared/traces; skips the test when the folder is absent."""
    p = TRACES / path
    if not TRACES.is_dir():
        pytest.skip("../shared/traces is absent")
    return p
