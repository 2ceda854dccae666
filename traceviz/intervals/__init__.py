"""Interval algebra over int64 nanosecond arrays (numba): unions, measures,
intersections, k-way sweeps (:mod:`.core`), containment queries (:mod:`.containment`),
lanes of non-overlapping intervals (:mod:`.lanes`) and time by precedence
(:mod:`.precedence`).

An interval is ``[start, end)`` with ``end >= start``. A *union* is a sorted array pair of
disjoint intervals; intervals that touch (``start == running end``) are merged, as HTA
does. Every function is O(n log n) at most and loops only inside numba. This package
imports numpy and numba only.
"""
from .containment import innermost_enclosing, step_of
from .core import (
                   combination_times,
                   grouped_combination_times,
                   grouped_measure,
                   grouped_span,
                   intersect,
                   measure,
                   union,
)
from .lanes import lanes
from .precedence import grouped_top_times

__all__ = ["union", "measure", "intersect", "combination_times",
           "grouped_combination_times", "grouped_measure", "grouped_span",
           "innermost_enclosing", "step_of", "lanes", "grouped_top_times"]
