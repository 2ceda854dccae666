"""Every real trace parses, and agrees row by row with the independent reference."""
from __future__ import annotations

from collections import Counter

import pytest
from helpers import needs_shared, parking_everything, shared_traces, trace_id
from reference import activities, event_count, load, read_bytes

import traceviz
from traceviz.parse.budget import MemoryPlan
from traceviz.table.schema import ACTIVITY_SCHEMA

TRACES = shared_traces()


@needs_shared
def test_there_are_real_traces():
    assert len(TRACES) >= 30


@needs_shared
@pytest.mark.parametrize("path", TRACES, ids=trace_id)
def test_matches_reference(path):
    doc = load(read_bytes(path))
    expected = activities(doc)
    result = traceviz.parse_trace(path)
    table = result.activities
    meta = result.meta
    assert table.schema.remove_metadata() == ACTIVITY_SCHEMA  # the declared types
    assert meta["stats"]["events"] == event_count(doc)
    assert meta["stats"]["truncated_at"] is None
    assert table.num_rows == len(expected)
    got = table.to_pydict()
    rows = {idx: i for i, idx in enumerate(got["index"])}
    assert set(rows) == set(expected)
    assert got["ts"] == sorted(got["ts"])
    by_cat = Counter(got["cat"])
    assert by_cat == Counter(e["cat"] for e in expected.values())
    assert Counter(got["kind"]) == Counter(e["kind"] for e in expected.values())
    fields = ("cat", "name", "ts", "dur", "correlation", "external_id", "launch_ts",
              "launch_dur", "launch_name", "cpu_op", "cpu_op_external_id", "iteration", "kind")
    for idx, exp in expected.items():
        i = rows[idx]
        exp = dict(exp)
        if exp["cpu_op_external_id"] is not None and exp["cpu_op_external_id"] < 0:
            exp["cpu_op_external_id"] = None
        for f in fields:
            assert got[f][i] == exp[f], (f, idx, got[f][i], exp[f])


@needs_shared
@pytest.mark.parametrize("name", ["hta/negative_queue_length_values_check/rank0.json.gz",
                                  "tracelens/mi300/resnet_act_checkpoint.json.gz"])
def test_small_budget_same_table(name):
    """With 2 MB for data the joins run on several hash parts and time buckets and the
    columns spill; the table is identical to the in-memory one."""
    path = next(p for p in TRACES if trace_id(p) == name)
    small = traceviz.parse_trace(path, plan=MemoryPlan.fixed(2 << 20))
    assert small.meta["stats"]["spilled_bytes"] > 0
    full = traceviz.parse_table(path)
    assert small.activities.replace_schema_metadata(None).equals(
        full.replace_schema_metadata(None))
    small.close()


@needs_shared
def test_activities_beyond_the_budget_are_a_warning():
    """A budget that covers the runtime but not the activities parks their arrays in
    files; one that does not cover even what the parked build holds per activity draws
    one warning with the expected peak (runtime + the build's fixed work + activities x
    PARKED_BYTES_PER_ACTIVITY); that much budget, none (and the arrays parked)."""
    from traceviz.parse.budget import BUILD_WORK, PARKED_BYTES_PER_ACTIVITY

    path = next(p for p in TRACES if trace_id(p) == "hta/trace_diff/control/control.json.gz")
    n = traceviz.parse_table(path).num_rows
    runtime, work = 200 << 20, 1 << 12  # fixed work below what the activities hold
    need = runtime + BUILD_WORK + n * PARKED_BYTES_PER_ACTIVITY
    # the runtime and fixed work are covered: the build and the activities are the reason
    assert need - 1 > runtime + work and n * PARKED_BYTES_PER_ACTIVITY > work
    short = traceviz.parse_trace(path, plan=MemoryPlan(need - 1, runtime, work=work))
    line, = (w for w in short.warnings if "per-activity arrays" in w)
    assert f"{n / 1e6:.1f} M GPU activities" in line
    assert f"expect a peak of up to ~{need >> 20} MB" in line
    with parking_everything():  # the arrays of this small trace are parked too
        enough = traceviz.parse_trace(path, plan=MemoryPlan(need, runtime, work=work))
    assert not [w for w in enough.warnings if "per-activity arrays" in w]
    assert enough.meta["stats"]["parked_bytes"] > 0
    for parsed in (short, enough):
        parsed.close()
