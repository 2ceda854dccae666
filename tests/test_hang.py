"""``traceviz hang``: the NCCL Flight Recorder dumps of a real 4-rank hang (PyTorch 2.11,
../shared/traces/gpu/flight_recorder; the truth in ../shared/reference/gpu) and
hand-built dump sets (a size mismatch, a point-to-point hang, a deadlock; a rank
without a dump: test_hang_hostile.py), and dumps that are not what they claim (cut, another version, a pickle that
names code)."""
from __future__ import annotations

import json
import pickle
import shutil

import pytest
from click.testing import CliRunner

from helpers import REFERENCE, shared
from traceviz.cli import main
from traceviz.commands import hang as command
from traceviz.errors import TraceVizError
from traceviz.ingest.flight_recorder import read_dump
from traceviz.synth.hang_dumps import write_dumps

FR = "gpu/flight_recorder"


def test_the_real_hang_names_the_rank_that_stopped():
    """Rank 2 stopped before step 3 (a stuck data loader); the others time out: rank 3
    in its TP all-reduce with rank 2, ranks 0 and 1 in step 3's collectives that need
    rank 2 (rank 1's DP partner, rank 3, is itself stuck in TP)."""
    truth = json.loads((REFERENCE / "gpu" / "flight_recorder.truth.json").read_text())
    result = command.run(shared(FR))
    h = result.value
    assert h.causes == (truth["stuck_rank"],)
    assert result.lines[0] == (
        f"hang: rank {truth['stuck_rank']} stopped before DATA_PARALLEL_GROUP all_reduce "
        "seq 4, TENSOR_MODEL_PARALLEL_GROUP all_reduce seq 4; every other rank waits on it")
    assert result.lines[1].startswith(f"rank {truth['stuck_rank']} never entered 3 op(s)")
    rows = {r["rank"]: r for r in result.tables["hang"].to_pylist()}
    assert rows[2]["state"] == "stopped" and rows[2]["cause"]
    tp_of_3 = next(g for g in truth["tp_groups"] if 3 in g)
    assert (rows[3]["group_desc"], rows[3]["waits_for"], rows[3]["never_entered"]) == (
        "TENSOR_MODEL_PARALLEL_GROUP", "2", "2")
    assert tp_of_3 == [2, 3]
    # the steps' collectives are numbered from 1: step 3's are seq 4
    assert {rows[r]["seq"] for r in (0, 1, 3)} == {truth["stuck_before_step"] + 1}
    assert rows[0]["group_desc"] == "DATA_PARALLEL_GROUP" and rows[0]["waits_for"] == "2"
    assert rows[1]["waits_for"] == "3" and rows[1]["never_entered"] is None
    assert "for rank 3, which waits in TENSOR_MODEL_PARALLEL_GROUP [2, 3] seq 4" in \
        rows[1]["chain"]
    groups = result.tables["hang_groups"].to_pylist()
    assert {(g["rank"], g["desc"], g["last_completed"]) for g in groups if g["rank"] == 2} \
        == {(2, "default_pg", 3), (2, "TENSOR_MODEL_PARALLEL_GROUP", 3),
            (2, "DATA_PARALLEL_GROUP", 3)}


def test_the_cli_writes_the_tables(tmp_path):
    out = tmp_path / "out"
    r = CliRunner().invoke(main, ["hang", str(shared(FR)), "-o", str(out)])
    assert r.exit_code == 0, r.output
    assert r.output.startswith("hang: rank 2 stopped before")
    for name in ("hang.csv", "hang.parquet", "hang_groups.csv", "hang.json"):
        assert (out / name).stat().st_size > 0
    doc = json.loads((out / "hang.json").read_text())
    assert doc["causes"] == [2] and len(doc["ranks"]) == 4


# ---- hand-built dump sets ----------------------------------------------------------------

def _entry(rid, pg, desc, seq, state, op="all_reduce", size=1024, p2p=False, p2p_seq=0):
    return {"frames": [{"name": "step", "filename": "train.py", "line": 10 + rid}],
            "record_id": rid, "pg_id": int(pg), "process_group": (pg, desc),
            "collective_seq_id": seq, "p2p_seq_id": p2p_seq, "op_id": seq,
            "profiling_name": f"nccl:{op}", "time_created_ns": 1000 + rid,
            "input_sizes": [[size]], "input_dtypes": ["Float"], "output_sizes": [[size]],
            "output_dtypes": ["Float"], "state": state, "retired": state == "completed",
            "timeout_ms": 600000, "is_p2p": p2p}


def _dump(groups, entries):
    return {"version": "2.10", "comm_lib_version": "2.28.9",
            "pg_config": {name: {"name": name, "desc": desc, "ranks": str(ranks)}
                          for name, (desc, ranks) in groups.items()},
            "pg_status": {}, "entries": entries}


_write = write_dumps  # one file per rank, as TORCH_NCCL_DEBUG_INFO_TEMP_FILE names them


DP = {"1": ("DATA_PARALLEL_GROUP", [0, 1])}


def test_a_size_mismatch_is_named(tmp_path):
    """Both ranks entered DP seq 2, with different sizes: the collective never completes
    on either; the mismatch is named (JSON dumps)."""
    dumps = {r: _dump(DP, [_entry(0, "1", "DATA_PARALLEL_GROUP", 1, "completed"),
                           _entry(1, "1", "DATA_PARALLEL_GROUP", 2, "started",
                                  size=1024 if r == 0 else 512)]) for r in (0, 1)}
    result = command.run(_write(tmp_path, dumps, as_json=True))
    h = result.value
    assert h.causes == ()
    (m,) = h.mismatches
    assert m == ("DATA_PARALLEL_GROUP [0, 1] seq 2: rank 0 all_reduce [[1024]] ['Float']; "
                 "rank 1 all_reduce [[512]] ['Float']")
    assert result.lines[0] == f"mismatch: {m}"


def test_a_point_to_point_hang(tmp_path):
    """Pipeline stages: rank 0 sends to rank 1 (its second send), rank 1 never posts the
    receive (it stopped after its first): rank 0 waits in the send for rank 1."""
    pp = {"5": ("PIPELINE_MODEL_PARALLEL_GROUP", [0, 1])}
    d0 = _dump(pp, [_entry(0, "5", "PIPELINE_MODEL_PARALLEL_GROUP", 0, "completed",
                           op="send 0->1", p2p=True, p2p_seq=1),
                    _entry(1, "5", "PIPELINE_MODEL_PARALLEL_GROUP", 0, "started",
                           op="send 0->1", p2p=True, p2p_seq=2)])
    d1 = _dump(pp, [_entry(0, "5", "PIPELINE_MODEL_PARALLEL_GROUP", 0, "completed",
                           op="recv 1<-0", p2p=True, p2p_seq=1)])
    result = command.run(_write(tmp_path, {0: d0, 1: d1}))
    rows = {r["rank"]: r for r in result.tables["hang"].to_pylist()}
    assert rows[0]["op"] == "send 0->1" and rows[0]["never_entered"] == "1"
    assert rows[1]["state"] == "stopped" and result.value.causes == (1,)


def test_a_deadlock_of_collectives_in_different_orders(tmp_path):
    """Rank 0 enters TP then DP, rank 1 DP then TP, both two-rank groups of ranks 0 and
    1: each waits in its first for the other, which waits in its own first: a cycle."""
    groups = {"1": ("TENSOR_MODEL_PARALLEL_GROUP", [0, 1]),
              "2": ("DATA_PARALLEL_GROUP", [0, 1])}
    d0 = _dump(groups, [_entry(0, "1", "TENSOR_MODEL_PARALLEL_GROUP", 1, "started"),
                        _entry(1, "2", "DATA_PARALLEL_GROUP", 1, "scheduled")])
    d1 = _dump(groups, [_entry(0, "2", "DATA_PARALLEL_GROUP", 1, "started"),
                        _entry(1, "1", "TENSOR_MODEL_PARALLEL_GROUP", 1, "scheduled")])
    h = command.run(_write(tmp_path, {0: d0, 1: d1})).value
    assert h.deadlock == (0, 1) and h.causes == ()
    assert h.verdict[0].startswith("deadlock: ranks 0, 1 wait for each other")


# ---- dumps that are not what they claim --------------------------------------------------

def test_bad_dumps_are_named_and_the_rest_analyzed(tmp_path):
    """A cut pickle, another format version and a pickle that names a function (it
    would run code: refused, and nothing runs): one line each; the good dumps are
    analyzed and the command exits 1."""
    folder = tmp_path / "dumps"
    shutil.copytree(shared(FR), folder)
    raw = (folder / "nccl_trace_rank_3").read_bytes()
    (folder / "nccl_trace_rank_3").write_bytes(raw[:len(raw) // 2])
    (folder / "nccl_trace_rank_4").write_bytes(pickle.dumps({"version": "1.5",
                                                             "entries": []}))
    marker = tmp_path / "ran"

    class Evil:
        def __reduce__(self):
            return (open, (str(marker), "w"))

    (folder / "nccl_trace_rank_5").write_bytes(pickle.dumps({"version": "2.10",
                                                             "entries": [Evil()]}))
    r = CliRunner().invoke(main, ["hang", str(folder), "-o", str(tmp_path / "out")])
    assert r.exit_code == 1
    assert not marker.exists()
    failed = [line for line in r.output.splitlines() if line.startswith("failed: ")]
    assert len(failed) == 3
    assert any("nccl_trace_rank_3" in f and "ends early at byte" in f for f in failed)
    assert any("nccl_trace_rank_4" in f and "format '1.5'" in f for f in failed)
    assert any("nccl_trace_rank_5" in f and "names io.open" in f for f in failed)
    assert "Traceback" not in r.output
    rows = {x["rank"]: x for x in json.loads((tmp_path / "out" / "hang.json").read_text())
            ["ranks"]}
    assert rows[3]["state"] == "no dump" and rows[2]["cause"]


def test_a_file_that_is_not_a_dump(tmp_path):
    (tmp_path / "rank_0").write_text("hello")
    with pytest.raises(TraceVizError, match="rank_0: not a readable Flight Recorder"):
        read_dump(tmp_path / "rank_0")
    with pytest.raises(TraceVizError, match="no Flight Recorder dump could be read"):
        command.run(tmp_path)
