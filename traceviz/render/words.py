"""Sentences that several renderers (text, report, HTML, figures) share, each written
once, so one fact reads the same in every command and format."""
from __future__ import annotations

from collections.abc import Callable

from ..analysis.advice import Advice

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


def saving_words(a: Advice, duration: Callable[[int], str]) -> str:
    """An advice's predicted saving in words, the same in every output (``duration``
    formats ns): ``saves 1.20 ms (3.4 %)``, ``, an upper bound`` for conditional advice;
    ``saves nothing`` where the what-if's iteration is no shorter (never a negative
    saving); ``saving n/a`` where it was not predicted."""
    if a.saving_ns is None:
        return "saving n/a"
    if a.saving_ns <= 0:
        return "saves nothing" + (f" (its what-if's iteration is {duration(-a.saving_ns)} "
                                  "longer)" if a.saving_ns < 0 else "")
    pct = "n/a" if a.saving_pct is None else f"{a.saving_pct:.1f} %"
    same = (f"; the same as advice {a.same_as}: each is then held by {a.bound}"
            if a.same_as and a.bound else "")
    return (f"saves {duration(a.saving_ns)} ({pct}{same})"
            + (", an upper bound" if a.standing == "conditional" else ""))
