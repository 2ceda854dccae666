"""Sentences that several renderers (text, report, HTML, figures) share, each written
once, so one fact reads the same in every command and format."""
from __future__ import annotations

# how a job's clocks were put on one (analysis.clocks: ClockSync.method, the diagnosis's
# ``clocks``), in words; "given": offsets the caller passed
_CLOCKS = {"shifted": "clocks synced from the collectives' ends",
           "own clocks": "one clock (the ranks' own)",
           "given": "clocks synced from given offsets",
           "none": "clocks not synced (each rank on its own clock)"}


def clock_words(ranks: int, method: str) -> str:
    """The clock verdict of ``ranks`` ranks whose clocks were put on one by ``method``
    ("shifted", "own clocks", "given" or "none"): what every command says of them."""
    if ranks == 1:
        return "one rank (its own clock)"
    return _CLOCKS[method]


def on_one_clock(method: str) -> bool:
    """Whether times of different ranks can be compared under ``method``."""
    return method != "none"
