"""A plain trace scanned in parts at once (traceviz.parse.reader._scan_parts) gives the
one-pass result: the same GPU and CPU tables and metadata on real traces split in two,
three and four parts at several points, the one pass when a split is not between two
events, and the same warnings / errors when a later part is cut or corrupt."""
from __future__ import annotations

import gzip

import pytest
from helpers import launch_events, needs_shared, shared_traces, trace_id, trace_text

import traceviz
import traceviz.parse.reader as reader
from traceviz.errors import TraceError

REAL = ("hta/trace_diff/control/control.json.gz",
        "hta/nccl_parser_config/nccl_data.json.gz",
        "hta/ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz",
        "tracelens/mi300/resnet_act_checkpoint.json.gz",
        "param/dlrm_kineto/worker3_step_12.1694128201557.pt.trace.json",
        "kineto/resnet50/worker0.1623143089861.pt.trace.json.gz")


def _plain(path, tmp_path):
    """``path`` as a plain JSON file (the split applies to plain files only)."""
    raw = path.read_bytes()
    out = tmp_path / (path.name.removesuffix(".gz").removesuffix(".json") + ".json")
    out.write_bytes(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)
    return out


def _split_near(monkeypatch, path, *fractions: float) -> None:
    """Split ``path`` at the event boundaries found from these fractions of its bytes
    (none: one pass)."""
    size = path.stat().st_size
    monkeypatch.setattr(reader, "_split_points", lambda src: sorted(
        {p for f in fractions if (p := reader._candidate(src, int(size * f))) is not None}))


def _parse(path, monkeypatch, *fractions: float):
    """(GPU table, CPU table, metadata, warnings, parts merged?) of ``path``, split near
    ``fractions`` of its bytes (none: one pass)."""
    merged = []
    merge = reader._merge

    def counting(a, b):
        merged.append(1)
        merge(a, b)

    monkeypatch.setattr(reader, "_merge", counting)
    _split_near(monkeypatch, path, *fractions)
    parsed = traceviz.parse_trace(path, cpu=True)
    try:
        return (parsed.activities.replace_schema_metadata(None),
                parsed.cpu.replace_schema_metadata(None), parsed.meta, parsed.warnings,
                bool(merged))
    finally:
        parsed.close()


@needs_shared
@pytest.mark.parametrize("name", REAL)
def test_parts_equal_one_pass(name, tmp_path, monkeypatch):
    path = _plain(next(p for p in shared_traces() if trace_id(p) == name), tmp_path)
    gpu, cpu, meta, warnings, _ = _parse(path, monkeypatch)
    split_used = 0
    for fractions in ((0.13,), (0.5,), (0.77,), (0.3, 0.6), (0.2, 0.45, 0.7)):
        g, c, m, w, merged = _parse(path, monkeypatch, *fractions)
        assert g.equals(gpu) and c.equals(cpu), (name, fractions)
        assert _facts(m) == _facts(meta) and w == warnings, (name, fractions)
        split_used += merged
    assert split_used >= 4  # the boundaries found were real ones


def _facts(meta: dict) -> dict:
    """The metadata but for the bytes spilled / parked: those follow the memory the
    process held when the parse began (its budget's data share), not the trace."""
    stats = {k: v for k, v in meta["stats"].items() if k not in ("spilled_bytes",
                                                                "parked_bytes")}
    return {**meta, "stats": stats}


def test_a_split_not_between_events_falls_back_to_one_pass(tmp_path, monkeypatch):
    """A comma that looks like a boundary but is not one (in a name that ends with
    "}, {", between objects in an event's args): the first half does not end between two
    events there, and the one pass is used."""
    events = launch_events(300, tricky="a}, {")
    for e in events[::5]:
        e.setdefault("args", {})["nested"] = [{"a": 1}, {"b": 2}]
    path = tmp_path / "t.json"
    data = trace_text(events)
    path.write_bytes(data)
    gpu, cpu, meta, warnings, _ = _parse(path, monkeypatch)
    in_name = data.index(b'a}, {"', len(data) // 2) + 2
    in_args = data.index(b'},\n', data.index(b'"nested"', len(data) // 3)) + 1
    for split in (in_name, in_args):
        assert data[split:split + 1] == b","
        monkeypatch.setattr(reader, "_merge", lambda a, b: pytest.fail("merged"))
        monkeypatch.setattr(reader, "_split_points", lambda src, at=split: [at])
        parsed = traceviz.parse_trace(path, cpu=True)
        assert parsed.activities.replace_schema_metadata(None).equals(gpu)
        assert parsed.cpu.replace_schema_metadata(None).equals(cpu)
        assert parsed.meta == meta and parsed.warnings == warnings
        parsed.close()


def test_cut_or_corrupt_later_part_as_one_pass(tmp_path, monkeypatch):
    data = trace_text(launch_events(400))
    cut = tmp_path / "cut.json"
    cut.write_bytes(data[:int(len(data) * 0.9)])
    one = _parse(cut, monkeypatch)
    for fractions in ((0.5,), (0.3, 0.6)):
        parts = _parse(cut, monkeypatch, *fractions)
        assert parts[4] and parts[0].equals(one[0]) and parts[3] == one[3]
        assert one[2]["stats"]["truncated_at"] == parts[2]["stats"]["truncated_at"]
    bad = tmp_path / "bad.json"
    at = data.index(b'"cat"', int(len(data) * 0.8))
    bad.write_bytes(data[:at] + b'"cat" ]] ' + data[at + 5:])
    errors = []
    for fractions in ((), (0.5,), (0.3, 0.6), (0.5, 0.9)):
        _split_near(monkeypatch, bad, *fractions)
        with pytest.raises(TraceError) as exc:
            traceviz.parse_trace(bad)
        errors.append(str(exc.value))
    assert len(set(errors)) == 1 and "byte" in errors[0]


def test_a_bare_array_of_events_splits_too(tmp_path, monkeypatch):
    path = tmp_path / "array.json"
    path.write_bytes(b"\xef\xbb\xbf  " + trace_text(launch_events(300), array=True))
    gpu, cpu, meta, warnings, _ = _parse(path, monkeypatch)
    for fractions in ((0.5,), (0.25, 0.5, 0.75)):
        g, c, m, w, merged = _parse(path, monkeypatch, *fractions)
        assert merged and g.equals(gpu) and c.equals(cpu) and m == meta and w == warnings


class _FailingFile:
    """An unbuffered file that fails like a disk error once it is past byte ``fail_at``."""

    def __init__(self, fh, fail_at: int) -> None:
        self._fh, self._fail_at = fh, fail_at

    def readinto(self, b) -> int:
        if self._fh.tell() >= self._fail_at:
            raise OSError(5, "Input/output error")
        return self._fh.readinto(memoryview(b)[:max(self._fail_at - self._fh.tell(), 1)])

    def tell(self) -> int:
        return self._fh.tell()

    def close(self) -> None:
        self._fh.close()


def test_a_read_error_in_a_later_part_names_its_file_offset(tmp_path, monkeypatch):
    path = tmp_path / "trace.json"
    data = trace_text(launch_events(2000))
    path.write_bytes(data)
    fail_at = int(len(data) * 0.8)  # inside the second of two parts

    class Failing(reader.FileRange):
        def __init__(self, *args) -> None:
            super().__init__(*args)
            self._fh = _FailingFile(self._fh, fail_at)

    monkeypatch.setattr(reader, "FileRange", Failing)
    _split_near(monkeypatch, path, 0.5)
    with pytest.raises(TraceError) as exc:
        traceviz.parse_trace(path)
    assert str(path) in str(exc.value)
    assert f"byte {fail_at}: read failed" in str(exc.value)
    assert "Input/output error" in str(exc.value)


@needs_shared
def test_parts_of_a_plain_file_seal_whole_blocks(monkeypatch, tmp_path):
    # a part of a plain file fills blocks of BLOCK_ROWS rows as one pass does, so merging
    # the parts joins (copies) no block: only each part's last block is short
    path = _plain(next(p for p in shared_traces() if trace_id(p) == REAL[0]), tmp_path)
    sizes = []
    seal = reader.ColumnStore.seal

    def recording(self, rows):
        sizes.append(rows)
        return seal(self, rows)

    monkeypatch.setattr(reader.ColumnStore, "seal", recording)
    joins = []
    coalesce = reader.SpillBudget.coalesce

    def joining(self, blocks, rows):
        before = len(blocks)
        coalesce(self, blocks, rows)
        joins.append(before - len(blocks))

    monkeypatch.setattr(reader.SpillBudget, "coalesce", joining)
    _split_near(monkeypatch, path, 0.5)
    traceviz.parse_trace(path).close()
    assert max(sizes) == reader.BLOCK_ROWS
    assert joins and sum(joins) <= len(joins)  # at most the two short blocks at the cut
