"""The diagnosis in brief, typed: what the ledger's text, the report and the HTML page
show of it (:meth:`.diagnosis.Diagnosis.summary`). JSON only at the edge: the report
keeps it as :meth:`Summary.to_json` (the report's ``diagnosis``) and reads it back with
:meth:`Summary.from_json`.

Times are ns per rank and iteration (means over the job's ledger rows); shares are % of
the mean span, in [0, 100] (None where the span is 0)."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import pyarrow as pa

from .extra_work import ExtraKernel
from .ledger import PARTS
from .stragglers import SCHEMA as STRAGGLER_SCHEMA
from .stragglers import Straggler


# the ledger's totals per iteration (:func:`~.diagnosis.totals`)
TOTALS_SCHEMA = pa.schema(
    [("iteration", pa.int32()), ("ranks", pa.int32()), ("job_span_ns", pa.int64()),
     ("span_ns", pa.int64())]
    + [(f"{p}_ns", pa.int64()) for p in PARTS] + [(f"{p}_pct", pa.float64())
                                                  for p in PARTS])

@dataclass(frozen=True)
class WaitedFor:
    """A rank others wait for by a margin of its own: ``ns`` exposed per rank and
    iteration, by ``ranks_waiting`` ranks; ``why`` it was late."""

    rank: int
    ns: float
    ranks_waiting: int
    why: str


@dataclass(frozen=True)
class Cause:
    """A part of the ledger the iterations lose (``part``; ``cause`` in words), its mean
    ``ns`` and ``pct``; for waiting for other ranks, who (``waited_for``, most first),
    handshakes / barriers (``handshake_ns``) and the ordinary spread (``spread_ns``)."""

    cause: str
    part: str
    ns: float
    pct: float | None
    waited_for: tuple[WaitedFor, ...] = ()
    handshake_ns: float | None = None
    spread_ns: float | None = None

    def to_json(self) -> dict[str, Any]:
        """The report's form (its keys in the order the report has always written)."""
        out: dict[str, Any] = {"cause": self.cause, "part": self.part, "ns": self.ns,
                               "waited_for": [asdict(w) for w in self.waited_for]}
        if self.part == "wait_rank":
            out["handshake_ns"] = self.handshake_ns
            out["spread_ns"] = self.spread_ns
        out["pct"] = self.pct
        return out

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Cause:
        return cls(d["cause"], d["part"], d["ns"], d["pct"],
                   tuple(WaitedFor(**w) for w in d.get("waited_for") or []),
                   d.get("handshake_ns"), d.get("spread_ns"))


@dataclass(frozen=True)
class Place:
    """Where a rank runs (None: unknown)."""

    node: int | None
    local_gpu: int | None

    def text(self) -> str:
        """``node N, GPU G`` (what is known; empty when nothing is)."""
        return ", ".join(b for b in (f"node {self.node}" if self.node is not None else "",
                                     f"GPU {self.local_gpu}" if self.local_gpu is not None
                                     else "") if b)


@dataclass(frozen=True)
class Summary:
    """The diagnosis in brief: ``totals`` (per iteration the job's mean ledger:
    :data:`.ledger` totals schema), the largest ``causes``, the ``stragglers`` (worst
    first), where the ranks they name run (``places``), whether any ranks were compared
    with peers, the ranks the chains of waits run through, the notes."""

    ranks: int
    synced: bool
    clocks: str
    totals: pa.Table
    causes: tuple[Cause, ...]
    stragglers: tuple[Straggler, ...]
    peers_compared: bool
    places: dict[int, Place] = field(default_factory=dict)
    chain_ranks: tuple[int, ...] = ()
    notes: tuple[str, ...] = ()
    extra: tuple[ExtraKernel, ...] = ()  # kernels one rank runs that its peers do not

    def to_json(self) -> dict[str, Any]:
        """The report's ``diagnosis`` (places keyed by the rank as text, as JSON has
        it)."""
        return {"ranks": self.ranks, "synced": self.synced, "clocks": self.clocks,
                "totals": self.totals.to_pylist(),
                "causes": [c.to_json() for c in self.causes],
                "stragglers": [asdict(s) for s in self.stragglers],
                "peers_compared": self.peers_compared,
                "places": {str(r): asdict(p) for r, p in self.places.items()},
                "chain_ranks": list(self.chain_ranks), "notes": list(self.notes),
                "extra": [asdict(e) for e in self.extra]}

    @classmethod
    def from_json(cls, d: dict[str, Any], totals_schema: pa.Schema = TOTALS_SCHEMA
                  ) -> Summary:
        """The summary a report kept (:meth:`to_json`), its totals of ``totals_schema``
        (an older report's columns it lacks are null)."""
        return cls(d["ranks"], d["synced"], d.get("clocks") or "given",
                   pa.Table.from_pylist(d["totals"], schema=totals_schema),
                   tuple(Cause.from_json(c) for c in d["causes"]),
                   tuple(Straggler(**{f.name: s.get(f.name) for f in STRAGGLER_SCHEMA})
                         for s in d["stragglers"]),
                   bool(d["peers_compared"]),
                   {int(r): Place(p.get("node"), p.get("local_gpu"))
                    for r, p in (d.get("places") or {}).items()},
                   tuple(d.get("chain_ranks") or ()), tuple(d.get("notes") or ()),
                   tuple(ExtraKernel(**e) for e in d.get("extra") or ()))


def from_report(diagnosis: dict[str, Any] | None) -> Summary | None:
    """The summary of a report's ``diagnosis`` (None: the report has none)."""
    return None if diagnosis is None else Summary.from_json(diagnosis)
