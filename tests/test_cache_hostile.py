"""The job cache (``.traceviz-cache``) read as hostile input: a link is refused and
nothing outside is touched, an entry of the wrong shape or swapped tables is a miss
(recomputed, noted, never an error or a wrong number), a FIFO or ``/dev/zero`` is not
read, two writers never pair one key with another's tables, a table rewritten with the
same size and time is not served stale, leftovers of dead runs are cleaned file by
file."""
from __future__ import annotations

import hashlib
import json
import multiprocessing
import os
import shutil
import time

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from traceviz.cli import main
from traceviz.commands import diagnose
from traceviz.ingest import job_cache
from traceviz.synth import SynthConfig, synthesize

CACHE = job_cache.FOLDER


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    """An 8-rank job (tp2 pp2 dp2, rank 3 slower) parsed with its CPU tables, and its
    ledger and advice computed with no cache at all (the truth every case must give)."""
    root = tmp_path_factory.mktemp("hostile-cache")
    src = synthesize(SynthConfig(tp=2, pp=2, dp=2, layers=4, microbatches=2,
                                 straggler_rank=3, with_stack=False), root / "job")
    assert CliRunner().invoke(main, ["batch", str(src), "-o", str(root / "tables"), "-q",
                                     "--cpu"]).exit_code == 0
    tables = root / "tables" / "iteration_10"
    res = diagnose.run(tables).value
    want = (res.diagnosis.ledger.to_pandas(), res.advice_table.to_pandas())
    shutil.rmtree(tables / CACHE)
    return tables, want


def _copy(job, tmp_path):
    tables, want = job
    copy = tmp_path / "tables"
    shutil.copytree(tables, copy, ignore=shutil.ignore_patterns(CACHE))
    return copy, want


def _diagnose_cli(folder, tmp_path):
    r = CliRunner().invoke(main, ["diagnose", str(folder), "-o", str(tmp_path / "out")])
    assert r.exit_code == 0, r.output
    assert "internal error" not in r.output and "Traceback" not in r.output
    return r.output


def _same(folder, want):
    res = diagnose.run(folder).value
    assert res.diagnosis.ledger.to_pandas().equals(want[0])
    assert res.advice_table.to_pandas().equals(want[1])
    assert not diagnose.run(folder).failed


def test_a_linked_cache_folder_is_refused_and_its_target_untouched(job, tmp_path):
    folder, want = _copy(job, tmp_path)
    mine = tmp_path / "my-results"
    for name in ("diagnosis", "report", "op_model"):
        (mine / name).mkdir(parents=True)
        (mine / name / "keep.txt").write_text("mine")
    (folder / CACHE).symlink_to(mine, target_is_directory=True)
    out = _diagnose_cli(folder, tmp_path)
    assert f"note: {folder / CACHE} is a link" in out
    assert CliRunner().invoke(main, ["report", str(folder), "-o",
                                     str(tmp_path / "rep")]).exit_code == 0
    assert sorted(p.name for p in mine.iterdir()) == ["diagnosis", "op_model", "report"]
    assert all((mine / n / "keep.txt").read_text() == "mine"
               for n in ("diagnosis", "report", "op_model"))
    assert sorted(p.name for p in (mine / "diagnosis").iterdir()) == ["keep.txt"]
    _same(folder, want)


def _write_entry(entry_dir, body: bytes, digest: bool = True) -> None:
    head = job_cache._digest(body).encode() if digest else b"x"
    (entry_dir / "entry.json").write_bytes(head + b"\n" + body)


@pytest.mark.parametrize("case", ["[]", "null", "wrong types", "unkeyed digest",
                                  "keyed digest, wrong types", "table out of the entry",
                                  "swapped tables", "fifo", "dev-zero", "entry is a file"])
def test_an_entry_of_the_wrong_shape_is_a_miss(job, tmp_path, case):
    """Each gives the numbers of a fresh run, a note, and the next run uses a good entry
    again (the bad one was overwritten)."""
    folder, want = _copy(job, tmp_path)
    diagnose.run(folder)
    entry = folder / CACHE / "diagnosis"
    body = entry.joinpath("entry.json").read_bytes().partition(b"\n")[2]
    doc = json.loads(body)
    if case in ("[]", "null"):
        (entry / "entry.json").write_text(case)
    elif case == "wrong types":
        doc["fields"]["failed"] = ["a", "b", "c"]
        _write_entry(entry, json.dumps(doc).encode(), digest=False)
    elif case == "unkeyed digest":  # forged without the user's key
        doc["fields"]["failed"] = ["a", "b", "c"]
        body = json.dumps(doc).encode()
        (entry / "entry.json").write_bytes(
            hashlib.blake2b(body, digest_size=16).hexdigest().encode() + b"\n" + body)
    elif case == "keyed digest, wrong types":  # forged with the key: the typed load refuses
        doc["fields"]["offsets"] = ["not", "a", "mapping"]
        _write_entry(entry, json.dumps(doc).encode())
    elif case == "table out of the entry":  # a path, even with the key: refused
        doc["tables"]["../../rank_0000"] = doc["tables"].pop("ledger")
        _write_entry(entry, json.dumps(doc).encode())
    elif case == "swapped tables":
        a, b = entry / "ledger.parquet", entry / "totals.parquet"
        a_bytes = a.read_bytes()
        a.write_bytes(b.read_bytes())
        b.write_bytes(a_bytes)
    elif case == "fifo":
        (entry / "entry.json").unlink()
        os.mkfifo(entry / "entry.json")
    elif case == "dev-zero":
        (entry / "entry.json").unlink()
        (entry / "entry.json").symlink_to("/dev/zero")
    else:
        shutil.rmtree(entry)
        entry.write_text("not a folder")
    start = time.perf_counter()
    out = _diagnose_cli(folder, tmp_path)
    assert time.perf_counter() - start < 120
    if case != "entry is a file":
        assert "note: kept result" in out and "recomputed" in out, out
    _same(folder, want)
    hit = job_cache.load_diagnosis(folder, job_cache.key_of(
        folder, None, {"num_layers": None, "link_gbps": None}), advice=True)
    assert hit is not None and hit[2] == []


def _writer(folder: str, which: int, seconds: float) -> None:
    table = pa.table({"which": pa.array([which] * 1000)})
    end = time.time() + seconds
    while time.time() < end:
        job_cache.store(Path(folder), "x", {"k": which}, {"t": table}, {"which": which})


def test_two_writers_never_pair_one_key_with_another_entrys_tables(tmp_path):
    procs = [multiprocessing.get_context("fork").Process(target=_writer,
                                                        args=(str(tmp_path), w, 3.0))
             for w in (1, 2)]
    for p in procs:
        p.start()
    hits, end = 0, time.time() + 3.0
    while time.time() < end:
        for w in (1, 2):
            found = job_cache.load(tmp_path, "x", {"k": w})
            if found is not None:
                hits += 1
                assert found[1]["which"] == w
                assert set(found[0]["t"].column("which").to_pylist()) == {w}
    for p in procs:
        p.join()
    assert hits > 10
    # nothing left over but the entry
    assert [p.name for p in (tmp_path / CACHE).iterdir()] == ["x"]


def test_a_table_rewritten_with_the_same_size_and_time_changes_the_key(tmp_path):
    """The key holds a digest of each table's footer: new content of the same size,
    its modification time set back, is a new key."""
    path = tmp_path / "rank0.parquet"
    table = pa.table({"ts": pa.array(range(100), pa.int64())})
    pq.write_table(table.replace_schema_metadata({"rank": "1"}), path)
    st = path.stat()
    before = job_cache.key_of(tmp_path, None, {})
    pq.write_table(table.replace_schema_metadata({"rank": "2"}), path)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert path.stat().st_size == st.st_size and path.stat().st_mtime_ns == st.st_mtime_ns
    assert job_cache.key_of(tmp_path, None, {}) != before


def test_a_result_kept_by_other_code_is_not_served(job, tmp_path, monkeypatch):
    folder, want = _copy(job, tmp_path)
    diagnose.run(folder)
    key = job_cache.key_of(folder, None, {"num_layers": None, "link_gbps": None})
    assert job_cache.load_diagnosis(folder, key, advice=True) is not None
    monkeypatch.setattr(job_cache, "code_digest", lambda: "other code")
    key = job_cache.key_of(folder, None, {"num_layers": None, "link_gbps": None})
    assert job_cache.load_diagnosis(folder, key, advice=True) is None


def test_leftovers_of_dead_runs_are_cleaned_file_by_file(tmp_path):
    base = tmp_path / CACHE
    dead = 2 ** 22 + 12345  # above the kernel's default pid_max: never a live process
    tmp = base / f".tmp-{dead}-diagnosis.abc"
    old = base / f".old-{dead}-report.def" / "report"
    live = base / f".tmp-{os.getpid()}-report.ghi"
    for d in (tmp, old, live):
        d.mkdir(parents=True)
        (d / "entry.json").write_text("{}")
        (d / "ledger.parquet").write_bytes(b"x")
    (old / "notes.txt").write_text("a user's file")
    job_cache.store(tmp_path, "x", {"k": 1}, {}, {})
    assert not tmp.exists()
    assert sorted(p.name for p in old.iterdir()) == ["notes.txt"]  # only an entry's files
    assert live.exists()


def test_a_removal_never_follows_a_link(tmp_path):
    """An entry folder swapped for a link to another folder (as a writer racing this one
    could) between its check and its removal: nothing in the target is removed."""
    victim = tmp_path / "victim"
    victim.mkdir()
    for name in ("rank_0000.parquet", "entry.json"):
        (victim / name).write_text("keep")
    base = tmp_path / CACHE
    holder = base / f".old-{2 ** 22 + 7}-diagnosis.x"
    holder.mkdir(parents=True)
    (holder / "0").symlink_to(victim, target_is_directory=True)  # renamed aside: a link
    (base / "diagnosis").symlink_to(victim, target_is_directory=True)
    job_cache._remove_entry(base / "diagnosis")
    job_cache.store(tmp_path, "x", {"k": 1}, {}, {})  # cleans the dead run's holder
    assert sorted(p.name for p in victim.iterdir()) == ["entry.json", "rank_0000.parquet"]
    assert not holder.exists() or list(holder.iterdir()) == [holder / "0"]


def test_the_key_is_the_users_alone(tmp_path, monkeypatch):
    """The digests' key is made once, readable by the user alone, and read again; a key
    file others can read is not used (a key for this process instead)."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    job_cache._secret.cache_clear()
    try:
        key = job_cache._secret()
        path = tmp_path / "traceviz" / "cache-key"
        assert path.read_bytes() == key and path.stat().st_mode & 0o777 == 0o600
        job_cache._secret.cache_clear()
        assert job_cache._secret() == key
        path.chmod(0o644)
        job_cache._secret.cache_clear()
        assert job_cache._secret() == job_cache._PROCESS_KEY != key
    finally:
        job_cache._secret.cache_clear()
