"""``traceviz topology``: Megatron's parallel groups of a job, from its sizes, its traces'
``pg_config`` or a topology file, as the Megatron-TraceViz text file or JSON."""
from __future__ import annotations

import json
import os

from ..errors import UsageError
from ..ingest.topology import from_file, from_traces_or_sends
from ..topology import groups_file
from ..topology.layout import Layout, to_json
from ..table.result import Result


def layout_of(*, world: int | None = None, tp: int = 1, pp: int = 1, cp: int = 1,
              ep: int = 1, expert_tp: int | None = None, order: str = "tp-cp-ep-dp-pp",
              traces: str | None = None, file: str | None = None) -> Layout:
    """The layout from the traces under ``traces`` (their process groups, else their
    sends / receives), a topology ``file``, or the sizes."""
    if traces:
        return from_traces_or_sends(traces)
    if file:
        return from_file(file)
    if world is None:
        raise UsageError("give --world (with --tp/--pp/...), --from-traces DIR or "
                         "--from-file FILE")
    return Layout(world=world, tp=tp, pp=pp, cp=cp, ep=ep, expert_tp=expert_tp, order=order)


def text_of(layout: Layout, as_json: bool, global_batch_size: str = "N/A") -> str:
    """The layout as JSON or as the Megatron-TraceViz file's text."""
    if as_json:
        return json.dumps(to_json(layout), indent=1)
    return groups_file.render(groups_file.GroupsFile.from_layout(layout, global_batch_size))


def run(*, world: int | None = None, tp: int = 1, pp: int = 1, cp: int = 1, ep: int = 1,
        expert_tp: int | None = None, order: str = "tp-cp-ep-dp-pp",
        traces: str | None = None, file: str | None = None, as_json: bool = False,
        global_batch_size: str = "N/A", output: str | None = None) -> Result:
    """The layout (:func:`layout_of`) as text: to ``output`` (a folder gets
    ``topology.json`` or ``unique_parallel_groups_<timestamp>.txt``), else as lines;
    ``value``: the layout."""
    layout = layout_of(world=world, tp=tp, pp=pp, cp=cp, ep=ep, expert_tp=expert_tp,
                       order=order, traces=traces, file=file)
    text = text_of(layout, as_json, global_batch_size)
    if output is None:
        return Result(lines=text.splitlines(), value=layout)
    if os.path.isdir(output):
        output = os.path.join(output, "topology.json" if as_json
                              else groups_file.default_name())
    return Result(texts={output: text}, value=layout)
