"""The ``unique_parallel_groups_<YYYYmmdd_HHMMSS>.txt`` file of the Megatron-TraceViz patch.

:func:`render` writes exactly the patch's text (80 ``=`` header lines, 50 ``-`` section
underlines, groups numbered from 1 and sorted, full-model groups numbered by their DP
coordinate, no trailing newline); :func:`parse_text` reads it back into the same
:class:`GroupsFile`, so ``render(parse_text(text)) == text`` for any file the patch (or
traceviz) wrote.
"""
from __future__ import annotations

import datetime as _dt
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import TraceVizError
from ..limits import MAX_WORLD
from .layout import Layout

HEADER = "=" * 80
RULE = "-" * 50
SECTIONS = (("tp", "TENSOR PARALLEL (TP) GROUPS"), ("pp", "PIPELINE PARALLEL (PP) GROUPS"),
            ("dp", "DATA PARALLEL (DP) GROUPS"), ("ep", "EXPERT PARALLEL (EP) GROUPS"))
NOT_AVAILABLE = "⚠️ Full model groups not available."
_GROUP = re.compile(r"^(?:TP |PP |DP |EP |Model )?Group (\d+): \[([0-9, ]*)\]$")


@dataclass
class GroupsFile:
    """The content of one topology file. Scalars are kept as written (``"N/A"``...)."""

    timestamp: str
    tp: str
    pp: str
    cp: str
    ep: str
    world: str
    global_batch_size: str
    total_ranks: int
    valid_ranks: int
    error_ranks: int
    groups: dict[str, list[list[int]]] = field(default_factory=dict)  # tp / pp / dp / ep
    full_model: dict[int, list[int]] | None = None
    full_model_sizes: tuple[str, str, str, str] = ("1", "1", "1", "1")  # TP, EP, PP, CP
    errors: dict[int, str] = field(default_factory=dict)

    @classmethod
    def from_layout(cls, layout: Layout, global_batch_size: int | str = "N/A",
                    timestamp: _dt.datetime | str | None = None) -> GroupsFile:
        """What the patch writes for a job with this layout."""
        groups = {"tp": sorted(layout.generator("dense", "tp")),
                  "pp": sorted(layout.generator("dense", "pp")),
                  "dp": sorted(layout.generator("dense", "dp"))}
        if layout.ep > 1:
            groups["ep"] = sorted(layout.generator("expert", "ep"))
        replicas = layout.model_replicas()
        tp_in_model = layout.etp if layout.ep > 1 else layout.tp
        cp_in_model = 1 if layout.ep > 1 else layout.cp
        return cls(
            timestamp=str(timestamp or _dt.datetime.now()),
            tp=str(layout.tp), pp=str(layout.pp), cp=str(layout.cp), ep=str(layout.ep),
            world=str(layout.world), global_batch_size=str(global_batch_size),
            total_ranks=layout.world, valid_ranks=layout.world, error_ranks=0,
            groups=groups, full_model=replicas,
            full_model_sizes=(str(tp_in_model), str(layout.ep), str(layout.pp),
                              str(cp_in_model)))

    def layout(self) -> Layout:
        """The parallel sizes this file describes."""
        for label, value in (("World Size", self.world), ("TP Size", self.tp),
                             ("PP Size", self.pp)):
            if not (value.isascii() and value.isdigit() and len(value) <= 18):
                raise TraceVizError(f"'{label}' is not a whole number below 10^18: "
                                    f"{value[:40]!r}")
        world, tp, pp = int(self.world), int(self.tp), int(self.pp)
        cp = int(self.cp) if self.cp.isascii() and self.cp.isdigit() else 1
        ep = int(self.ep) if self.ep.isascii() and self.ep.isdigit() else 1
        expert_tp = None
        if ep > 1 and self.full_model_sizes[0].isdigit():
            expert_tp = int(self.full_model_sizes[0])
        return Layout(world=world, tp=tp, pp=pp, cp=cp, ep=ep, expert_tp=expert_tp)


def default_name(now: _dt.datetime | None = None) -> str:
    return f"unique_parallel_groups_{(now or _dt.datetime.now()):%Y%m%d_%H%M%S}.txt"


def _group_lines(groups: list[list[int]], first: int = 1) -> list[str]:
    return [f"Group {i}: [{', '.join(map(str, g))}]" for i, g in enumerate(groups, first)]


def render(f: GroupsFile) -> str:
    """The file's exact text."""
    lines = [HEADER, "MEGATRON PARALLEL CONFIGURATION", HEADER,
             f"Timestamp: {f.timestamp}", f"TP Size: {f.tp}", f"PP Size: {f.pp}",
             f"CP Size: {f.cp}", f"EP Size: {f.ep}", f"World Size: {f.world}", "",
             f"Global Batch Size: {f.global_batch_size}", "",
             "STATISTICS", RULE, f"Total Ranks: {f.total_ranks}",
             f"Valid Ranks: {f.valid_ranks}", f"Error Ranks: {f.error_ranks}"]
    for key, title in SECTIONS:
        if key in f.groups:
            lines += ["", title, RULE, *_group_lines(f.groups[key]),
                      f"Total groups: {len(f.groups[key])}"]
    lines += ["", "FULL MODEL RANK GROUPS (by DP Rank)", RULE]
    if f.full_model is None:
        lines.append(NOT_AVAILABLE)
    else:
        tp, ep, pp, cp = f.full_model_sizes
        size = len(next(iter(f.full_model.values()), []))
        lines += ["Each DP rank contains ONE complete model replica with ALL shards.",
                  f"Full model = TP{tp} x EP{ep} x PP{pp} x CP{cp} = {size} ranks", RULE]
        lines += [f"Group {k}: [{', '.join(map(str, g))}]" for k, g in f.full_model.items()]
        lines += ["", f"Total model replicas (DP): {len(f.full_model)}"]
    if f.errors:
        lines += ["", "ERROR INFORMATION", RULE]
        lines += [f"Rank {r}: {msg}" for r, msg in sorted(f.errors.items())]
    return "\n".join(lines)


def parse_text(text: str, source: str = "<topology>") -> GroupsFile:
    """Read a topology file (as written by the patch or :func:`render`)."""
    lines = text.split("\n")

    def scalar(label: str) -> str:
        for line in lines:
            if line.startswith(label + ": "):
                return line[len(label) + 2:]
        raise TraceVizError(f"{source}: not a Megatron parallel-groups file "
                            f"(no '{label}:' line)")

    def number(label: str) -> int:
        value = scalar(label)
        if not (value.isascii() and value.isdigit() and len(value) <= 18):
            raise TraceVizError(f"{source}: '{label}' is not a whole number below 10^18: "
                                f"{value[:40]!r}")
        return int(value)

    out = GroupsFile(
        timestamp=scalar("Timestamp"), tp=scalar("TP Size"), pp=scalar("PP Size"),
        cp=scalar("CP Size"), ep=scalar("EP Size"), world=scalar("World Size"),
        global_batch_size=scalar("Global Batch Size"), total_ranks=number("Total Ranks"),
        valid_ranks=number("Valid Ranks"), error_ranks=number("Error Ranks"))
    for key, title in SECTIONS:
        if title in lines:
            out.groups[key] = [g for _, g in _read_groups(lines, lines.index(title) + 2,
                                                           source)]
    title = "FULL MODEL RANK GROUPS (by DP Rank)"
    if title not in lines:
        raise TraceVizError(f"{source}: no '{title}' section")
    at = lines.index(title) + 2
    if at + 1 >= len(lines):
        raise TraceVizError(f"{source}: the file ends inside '{title}' (cut?)")
    if lines[at] == NOT_AVAILABLE:
        out.full_model = None
    else:
        m = re.match(r"Full model = TP(\S+) x EP(\S+) x PP(\S+) x CP(\S+) = \d+ ranks$",
                     lines[at + 1])
        if not m:
            raise TraceVizError(f"{source}: line {at + 2}: unexpected full-model line")
        out.full_model_sizes = (m.group(1), m.group(2), m.group(3), m.group(4))
        out.full_model = dict(_read_groups(lines, at + 3, source))
    if "ERROR INFORMATION" in lines:
        for line in lines[lines.index("ERROR INFORMATION") + 2:]:
            m = re.match(r"Rank (\d+): (.*)$", line)
            if m:
                out.errors[int(m.group(1))] = m.group(2)
    return out


def _read_groups(lines: list[str], start: int, source: str) -> list[tuple[int, list[int]]]:
    out = []
    for i in range(start, len(lines)):
        m = _GROUP.match(lines[i])
        if not m:
            break
        try:
            ranks = [int(x) for x in m.group(2).split(",") if x.strip()]
            number = int(m.group(1))
        except ValueError:
            raise TraceVizError(f"{source}: line {i + 1}: a group's ranks are not whole "
                                "numbers") from None
        if number > MAX_WORLD or any(not 0 <= r < MAX_WORLD for r in ranks):
            raise TraceVizError(f"{source}: line {i + 1}: a rank beyond {MAX_WORLD:,}: not "
                                "a real job's")
        out.append((number, ranks))
    return out


def from_file(path: str | os.PathLike) -> Layout:
    """Layout stated by a ``unique_parallel_groups_*.txt`` file."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise TraceVizError(f"{path}: cannot read topology file: {exc.strerror}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise TraceVizError(f"{path}: byte {exc.start}: not UTF-8 text (a Megatron "
                            "parallel-groups file is text)") from None
    try:
        return parse_text(text, str(path)).layout()
    except TraceVizError as exc:  # every error names the file
        why = str(exc)
        raise TraceVizError(why if why.startswith(str(path)) else f"{path}: {why}") from None
