"""``traceviz hang`` on dumps built to exhaust, stall or fool it (each built here, none
stored): bounded time and memory, one line naming the file and the field, the other
dumps analysed; a rank without a dump is no cause; a large hang is summarised; CSV cells
are neutralised; ``--world`` is checked."""
from __future__ import annotations

import json
import pickle
import resource
import shutil
import struct
import time

import pytest
from click.testing import CliRunner

from helpers import shared
from test_hang import DP, _dump, _entry, _write
from traceviz.cli import main
from traceviz.commands import hang as command
from traceviz.errors import TraceVizError
from traceviz.ingest.flight_recorder import read_dump
from traceviz.ingest.plain_pickle import load_plain
from traceviz.synth.hang_dumps import hang_dumps, write_dumps

FR = "gpu/flight_recorder"


@pytest.fixture(autouse=True, scope="module")
def _compiled():
    """The opcode pass compiled (or its cache loaded) before anything is measured."""
    load_plain(pickle.dumps({"version": "2.10"}))


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _bounded(call, seconds: float = 5.0, mb: float = 300.0):
    """``call()``'s result (or its exception), asserting it took under ``seconds`` and
    grew this process's peak memory by under ``mb``."""
    before, start = _rss_mb(), time.perf_counter()
    try:
        out = call()
    except TraceVizError as exc:
        out = exc
    assert time.perf_counter() - start < seconds
    assert _rss_mb() - before < mb
    return out


def _real_plus(tmp_path, extra: dict[str, bytes]):
    """The real 4-rank hang's dumps with ``extra`` files beside them."""
    folder = tmp_path / "dumps"
    shutil.copytree(shared(FR), folder)
    for name, raw in extra.items():
        (folder / name).write_bytes(raw)
    return folder


def _run_cli(folder, tmp_path, *args):
    out = tmp_path / "out"
    r = CliRunner().invoke(main, ["hang", str(folder), "-o", str(out), *args])
    assert "Traceback" not in r.output
    return r, out


def test_a_memo_index_far_beyond_the_file_is_refused(tmp_path):
    """9 bytes: PROTO 4, NONE, LONG_BINPUT 2^28, STOP. CPython's C unpickler would
    allocate 4 GB for the memo; the opcode pass refuses it at byte 3."""
    bomb = b"\x80\x04N" + b"r" + struct.pack("<I", 1 << 28) + b"."
    assert len(bomb) == 9
    (tmp_path / "rank_0").write_bytes(bomb)
    err = _bounded(lambda: read_dump(tmp_path / "rank_0"), seconds=2, mb=50)
    assert isinstance(err, TraceVizError)
    assert "rank_0: not a readable Flight Recorder pickle at byte 3: a memo index" in str(err)


def test_a_tuple_key_that_would_hash_forever_is_refused(tmp_path):
    """A dict key of 60 nested pairs of one shared tuple: hashing it visits 2^60 tuples.
    Dict keys must be strings or numbers: refused before anything is built."""
    raw = bytearray(b"\x80\x04}K\x00\x85\x94")  # {} (0,) memo 0
    for i in range(60):
        raw += b"h" + bytes([i]) + b"h" + bytes([i]) + b"\x86\x94"  # (t, t) memo i+1
    raw += b"K\x01s."  # {deep: 1}
    (tmp_path / "rank_0").write_bytes(bytes(raw))
    err = _bounded(lambda: read_dump(tmp_path / "rank_0"), seconds=2, mb=50)
    assert "a dict key that is not a string" in str(err)


def test_shared_references_never_expand_beyond_the_file(tmp_path):
    """1,000 entries that are one dict whose sizes are one list of 1,000 references to
    one list of 1,000 numbers: a few KB that would expand to 10^9 numbers."""
    inner = list(range(1000))
    entry = _entry(0, "1", "DATA_PARALLEL_GROUP", 1, "started")
    entry["input_sizes"] = [inner] * 1000
    raw = pickle.dumps(_dump(DP, [entry] * 1000))
    assert len(raw) < 16_000
    (tmp_path / "rank_0").write_bytes(raw)
    err = _bounded(lambda: read_dump(tmp_path / "rank_0"), seconds=3, mb=100)
    assert "entry 0.input_sizes: more values than the file holds" in str(err)


def test_a_long_point_to_point_name_is_read_in_linear_time(tmp_path):
    """Three entries named ``nccl:send`` followed by 16,000 times ``send``: the name
    pattern once backtracked for a minute; names are capped and the pattern bounded."""
    pp = {"5": ("PIPELINE_MODEL_PARALLEL_GROUP", [0, 1])}
    entries = [_entry(i, "5", "PIPELINE_MODEL_PARALLEL_GROUP", 0, "started",
                      op="send" + "send" * 16000, p2p=True, p2p_seq=i + 1) for i in range(3)]
    start = time.perf_counter()
    h = command.run(_write(tmp_path, {0: _dump(pp, entries), 1: _dump(pp, [])}))
    assert time.perf_counter() - start < 3
    assert h.value.causes == ()


@pytest.mark.parametrize("field, value, says", [
    ("pg_status", {"0": {"last_enqueued_collective": float("inf")}},
     "pg_status['0'].last_enqueued_collective is inf"),
    ("pg_status", {"0": {"last_completed_collective": 1 << 64}},
     "pg_status['0'].last_completed_collective is 18446744073709551616"),
    ("entry", {"collective_seq_id": 10 ** 4300},
     "entry 0.collective_seq_id is an integer of 14,285 bits"),
    ("entry", {"record_id": -5}, "entry 0.record_id is -5"),
    ("entry", {"state": ["completed"]}, "entry 0.state is a list, not a text"),
    ("pg_config", {"9": {"desc": "x", "ranks": "[0, 3000000000]"}},
     "pg_config[9].ranks is 3000000000"),
])
def test_a_value_out_of_range_fails_that_dump_alone(tmp_path, field, value, says):
    """One line naming the file and the field; the real dumps beside it are analysed
    (rank 2 is still the cause)."""
    doc = _dump({"0": ("default_pg", [0, 1, 2, 3])},
                [_entry(0, "0", "default_pg", 1, "completed")])
    if field == "entry":
        doc["entries"][0].update(value)
    else:
        doc[field] = value
    folder = _real_plus(tmp_path, {"nccl_trace_rank_7": pickle.dumps(doc)})
    r, out = _run_cli(folder, tmp_path)
    assert r.exit_code == 1
    (failed,) = [x for x in r.output.splitlines() if x.startswith("failed: ")]
    assert "nccl_trace_rank_7: " in failed and says in failed
    assert json.loads((out / "hang.json").read_text())["causes"] == [2]


def test_deeply_nested_values_and_ranks_out_of_range(tmp_path):
    """A name nested in 200,000 lists (pickle and JSON), a rank of 2^31 in a file's name:
    each one line, the others analysed."""
    deep = (b"\x80\x04}(X\x07\x00\x00\x00entries]}(X\x0e\x00\x00\x00profiling_name"
            + b"(" * 200_000 + b"X\x01\x00\x00\x00x" + b"l" * 200_000
            + b"uaX\x07\x00\x00\x00versionX\x04\x00\x00\x002.10u.")
    deep_json = (b'{"version": "2.10", "entries": [{"profiling_name": ' + b"[" * 200_000
                 + b'"x"' + b"]" * 200_000 + b"}]}")
    good = pickle.dumps(_dump({"0": ("default_pg", [0, 1])}, []))
    folder = _real_plus(tmp_path, {"nccl_trace_rank_8": deep, "nccl_trace_rank_9": deep_json,
                                   "nccl_trace_rank_2147483648": good})
    r, out = _bounded(lambda: _run_cli(folder, tmp_path), seconds=20, mb=300)
    assert r.exit_code == 1
    failed = [x for x in r.output.splitlines() if x.startswith("failed: ")]
    assert len(failed) == 3
    assert any("rank_8: entry 0.profiling_name is a list, not a text" in f for f in failed)
    assert any("rank_9: not valid JSON" in f for f in failed)
    assert any("rank_2147483648: its name ends with 2147483648, not a rank" in f
               for f in failed)
    assert json.loads((out / "hang.json").read_text())["causes"] == [2]


# ---- a rank without a dump ---------------------------------------------------------------

def test_a_missing_dump_is_unknown_where_its_peers_completed(tmp_path):
    """The real hang without rank 0's dump: rank 0 took part in every collective its
    peers completed; it is neither a cause nor blamed; rank 2 still is the cause."""
    folder = _real_plus(tmp_path, {})
    (folder / "nccl_trace_rank_0").unlink()
    h = command.run(folder).value
    assert h.causes == (2,)
    rows = {r.rank: r for r in h.ranks}
    assert rows[0].state == "no dump" and 0 not in h.causes and 0 not in h.suspects
    assert not any("rank 0 never entered" in line for line in h.verdict)


def test_only_the_stopped_ranks_dump(tmp_path):
    """Only rank 2's dump (the rank that stopped): the others are unknown, never blamed;
    rank 2 is named as possibly the cause."""
    folder = tmp_path / "dumps"
    folder.mkdir()
    shutil.copy(shared(FR) / "nccl_trace_rank_2", folder)
    h = command.run(folder).value
    assert h.causes == () and h.suspects == (2,)
    assert h.verdict[0].startswith("rank(s) 2 wait in nothing")
    assert {r.rank: r.state for r in h.ranks} == {0: "no dump", 1: "no dump", 2: "stopped",
                                                   3: "no dump"}


def test_a_missing_dump_is_a_suspect_for_what_no_member_completed(tmp_path):
    """Ranks 0 and 1 wait in the world all-reduce seq 3 that no member completed; rank
    2's dump is missing: it may never have entered it (a suspect, not a cause)."""
    world = {"0": ("default_pg", [0, 1, 2])}
    dumps = {r: _dump(world, [_entry(0, "0", "default_pg", 1, "completed"),
                              _entry(1, "0", "default_pg", 2, "completed"),
                              _entry(2, "0", "default_pg", 3, "scheduled")])
             for r in (0, 1)}
    result = command.run(_write(tmp_path, dumps))
    h = result.value
    assert h.causes == () and h.suspects == (2,)
    rows = {r["rank"]: r for r in result.tables["hang"].to_pylist()}
    assert rows[2]["state"] == "no dump" and not rows[2]["cause"] and rows[2]["suspect"]
    assert rows[0]["waits_for"] == "1,2" and rows[0]["never_entered"] is None
    assert result.lines[0].startswith("no dump from rank(s) 2: possibly the cause")
    assert any("no dump from rank(s) 2" in n for n in result.notes)


# ---- scale, output, options --------------------------------------------------------------

def test_a_large_hang_is_summarised(tmp_path):
    """512 ranks (tp2 pp4 dp64), rank 5 stopped: it alone is the cause; the verdict is a
    few lines (ranks in the same state as one), every rank in the table; the ranks that
    wait follow the synthesizer's truth."""
    dumps, truth = hang_dumps(512, tp=2, pp=4, stopped=(5,), steps=3, stop_step=2)
    result = command.run(write_dumps(tmp_path / "d", dumps))
    h = result.value
    assert h.causes == (5,) and h.suspects == ()
    assert len(result.lines) <= 9
    assert result.lines[0].startswith("hang: rank 5 stopped before ")
    assert result.lines[0].endswith("; every other rank waits on it")
    assert result.lines[1].startswith("rank 5 never entered")
    rows = {r["rank"]: r for r in result.tables["hang"].to_pylist()}
    assert len(rows) == 512
    for r, (desc, op) in truth.waiting.items():
        assert (rows[r]["group_desc"], rows[r]["op"]) == (desc, op), r
    assert rows[5]["state"] == "stopped"
    assert sum(1 for r in rows.values() if r["state"] == "waiting") == len(truth.waiting)


def test_csv_cells_are_neutralised(tmp_path):
    """A frame's file name that is a formula and an op name with a terminal escape:
    hang.csv holds them inert (hang.parquet as they were)."""
    entries = [_entry(0, "1", "DATA_PARALLEL_GROUP", 1, "started", op="all_reduce\x1b[2J")]
    entries[0]["frames"] = [{"name": "f", "filename": '=HYPERLINK("http://x")', "line": 1}]
    folder = _write(tmp_path / "d", {0: _dump(DP, entries), 1: _dump(DP, [])})
    r, out = _run_cli(folder, tmp_path)
    text = (out / "hang.csv").read_text()
    assert "\x1b" not in text and "all_reduce\\x1b[2J" in text
    assert "'=HYPERLINK" in text and ',"=HYPERLINK' not in text


def test_world_is_checked(tmp_path):
    r, _ = _run_cli(shared(FR), tmp_path, "--world", "10000000")
    assert r.exit_code == 2 and "--world" in r.output
    r, _ = _run_cli(shared(FR), tmp_path, "--world", "-1")
    assert r.exit_code == 2
    r, out = _run_cli(shared(FR), tmp_path, "--world", "3")  # the dumps name 4 ranks
    assert r.exit_code == 1 and len(r.output.splitlines()) == 1
    assert "nccl_trace_rank_0: pg_config[0].ranks lists 4 ranks, more than the job's 3 " \
           "(--world)" in r.output
    folder = _write(tmp_path / "d", {r: _dump(DP, []) for r in (0, 1, 2)})
    r, out = _run_cli(folder, tmp_path, "--world", "2")
    (failed,) = [x for x in r.output.splitlines() if x.startswith("failed: ")]
    assert "nccl_trace_rank_2: rank 2, beyond the job's 2 ranks (--world)" in failed


def test_sends_and_receives_that_match_are_no_mismatch(tmp_path):
    """A send ``0->1`` and its receive ``1<-0`` (ranks local to the group, global 4 and
    6), and an all-to-all whose members' sizes differ by design: no mismatch."""
    groups = {"5": ("PIPELINE_MODEL_PARALLEL_GROUP", [4, 6]),
              "7": ("EXPERT_MODEL_PARALLEL_GROUP", [4, 6])}
    d4 = _dump(groups, [_entry(0, "5", "PIPELINE_MODEL_PARALLEL_GROUP", 0, "completed",
                               op="send 0->1", p2p=True, p2p_seq=1),
                        _entry(1, "7", "EXPERT_MODEL_PARALLEL_GROUP", 1, "started",
                               op="all_to_all", size=300)])
    d6 = _dump(groups, [_entry(0, "5", "PIPELINE_MODEL_PARALLEL_GROUP", 0, "completed",
                               op="recv 1<-0", p2p=True, p2p_seq=1),
                        _entry(1, "7", "EXPERT_MODEL_PARALLEL_GROUP", 1, "started",
                               op="all_to_all", size=500)])
    h = command.run(_write(tmp_path, {4: d4, 6: d6})).value
    assert h.mismatches == ()


def test_integer_keys_that_share_one_hash_are_refused(tmp_path):
    """40,000 integer keys, each a multiple of 2^61 - 1 (all hash to 0): building the
    dict would take quadratic time. Dict keys must be strings: refused at once."""
    m = (1 << 61) - 1
    raw = bytearray(b"\x80\x04}(")
    for k in range(1, 40_001):
        v = (k * m).to_bytes(10, "little", signed=True)
        raw += b"\x8a\x0a" + v + b"N"
    (tmp_path / "rank_0").write_bytes(bytes(raw) + b"u.")
    err = _bounded(lambda: read_dump(tmp_path / "rank_0"), seconds=2, mb=100)
    assert "a dict key that is not a string" in str(err)


def test_shared_frames_are_looked_at_once(tmp_path):
    """200,000 entries that are one dict whose frames are 256 references to one frame
    with 5,000-character names (a 400 KB file): read in seconds, not minutes."""
    frame = {"filename": "torch/" + "x" * 5000, "name": "f" * 5000, "line": 1}
    entry = _entry(0, "1", "DATA_PARALLEL_GROUP", 1, "completed")
    entry.update(frames=[frame] * 256, input_sizes=[], output_sizes=[], input_dtypes=[])
    (tmp_path / "nccl_trace_rank_0").write_bytes(pickle.dumps(_dump(DP, [entry] * 200_000)))
    d = _bounded(lambda: read_dump(tmp_path / "nccl_trace_rank_0"), seconds=15, mb=400)
    assert len(d.entries) == 200_000 and d.entries[0].where.startswith("torch/xxx")


def test_lone_surrogates_are_replaced(tmp_path):
    """A lone surrogate in an op name (JSON and pickle can both hold one; UTF-8 cannot):
    replaced, and the dumps analysed and written."""
    for as_json in (False, True):
        entries = [_entry(0, "1", "DATA_PARALLEL_GROUP", 1, "started",
                          op="all_reduce\ud800")]
        folder = _write(tmp_path / f"d{as_json}", {0: _dump(DP, entries), 1: _dump(DP, [])},
                        as_json=as_json)
        r, out = _run_cli(folder, tmp_path)
        assert r.exit_code == 0, r.output
        assert "all_reduce?" in (out / "hang.csv").read_text()


# ---- point-to-point pairs when a ring buffer dropped earlier ones ------------------------

PP2 = {"2": ("PIPELINE_MODEL_PARALLEL_GROUP", [0, 1])}
PP3 = {"2": ("PIPELINE_MODEL_PARALLEL_GROUP", [0, 1, 2])}


def _p2p(rid, k, state, op, size=1024, group="2"):
    return _entry(rid, group, "PIPELINE_MODEL_PARALLEL_GROUP", 0, state, op=op, size=size,
                  p2p=True, p2p_seq=k)


def test_a_pair_of_two_is_matched_by_its_p2p_seq(tmp_path):
    """Both ranks are in transfer #5 (their GPUs started it, the network never ends it);
    rank 0's ring buffer already dropped its sends #1 and #2. Sizes alternate, so
    pairing by position in each dump would pair #3 with #1 and see mismatches."""
    size = lambda k: 1024 * (k % 3 + 1)  # noqa: E731
    state = lambda k: "completed" if k < 5 else "started"  # noqa: E731
    d0 = _dump(PP2, [_p2p(100 + k, k, state(k), "send 0->1", size(k)) for k in (3, 4, 5)])
    d1 = _dump(PP2, [_p2p(200 + k, k, state(k), "recv 1<-0", size(k)) for k in range(1, 6)])
    result = command.run(_write(tmp_path, {0: d0, 1: d1}))
    h = result.value
    assert h.mismatches == () and h.missing == () and h.causes == ()
    assert result.lines[0].startswith("hang: ranks 0, 1 are all in PIPELINE_MODEL_PARALLEL_"
                                      "GROUP [0, 1] send 0 -> 1 p2p seq 5")
    assert "every member's GPU started it" in result.lines[0]


@pytest.mark.parametrize("peer_stopped", [False, True])
def test_sends_whose_place_is_lost_are_not_paired_by_position(tmp_path, peer_stopped):
    """A group of three: rank 1's ring dropped its first receives, so the place of each
    of its transfers with rank 0 is unknown. Waiting in one, they are in it together;
    where rank 1 completed all it issued, it never entered rank 0's send: the cause."""
    last = "completed" if peer_stopped else "started"
    d0 = _dump(PP3, [_p2p(10 + k, k, "completed" if k < 4 else "started", "send 0->1",
                          size=1024 * k) for k in range(1, 5)])
    recvs = [_p2p(20 + k, k, "completed", "recv 1<-0", size=1024 * k) for k in (3,)]
    if not peer_stopped:
        recvs.append(_p2p(24, 4, last, "recv 1<-0", size=4096))
    d1 = _dump(PP3, recvs)
    d2 = _dump(PP3, [])
    h = command.run(_write(tmp_path, {0: d0, 1: d1, 2: d2})).value
    assert h.mismatches == ()
    if peer_stopped:
        assert h.causes == (1,)
    else:
        assert h.causes == () and h.deadlock == ()
        assert h.verdict[0].startswith("hang: ranks 0, 1 are all in")
