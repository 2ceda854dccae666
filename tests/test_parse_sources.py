"""The same content through every source gives the same table."""
from __future__ import annotations

import gzip
import io
import json
import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zstandard
from helpers import shared
from reference import read_bytes

import traceviz
from traceviz.errors import TraceError
from traceviz.parse import reader
from traceviz.parse.cpu_table import CPU_ONLY_FIELDS
from traceviz.table.schema import DELTA_COLUMNS, group_ranks

TRACE = "hta/nccl_parser_config/nccl_data.json.gz"  # pretty-printed, fractional µs


def _strip(table):
    """The table without metadata that names the source."""
    return table.replace_schema_metadata(None)


class _ReadOnly:
    """A file object with only ``read``, returning short reads (like a socket)."""

    def __init__(self, data: bytes) -> None:
        self._data = io.BytesIO(data)

    def read(self, size: int = -1) -> bytes:
        return self._data.read(min(size, 4093) if size >= 0 else size)


def test_compressions_and_layouts_agree(tmp_path):
    data = read_bytes(shared(TRACE))
    doc = json.loads(data)
    minified = json.dumps(doc, separators=(",", ":")).encode()
    variants = {
        "plain.json": data,
        "minified.json": minified,
        "spaced.json": json.dumps(doc).encode(),
        "trace.json.gz": gzip.compress(data),
        "multimember.json.gz": gzip.compress(data[:len(data) // 2])
        + gzip.compress(data[len(data) // 2:]),
        "trace.json.zst": zstandard.ZstdCompressor().compress(minified),
        "named_wrong.json": gzip.compress(data),  # compression is sniffed, not named
    }
    tables = {}
    for name, payload in variants.items():
        path = tmp_path / name
        path.write_bytes(payload)
        tables[name] = traceviz.parse_table(path)
    tables["fileobj"] = traceviz.parse_table(io.BytesIO(gzip.compress(data)))
    tables["plain fileobj"] = traceviz.parse_table(io.BytesIO(data))
    tables["read-only fileobj"] = traceviz.parse_table(_ReadOnly(data))
    tables["read-only gz fileobj"] = traceviz.parse_table(_ReadOnly(gzip.compress(data)))
    base = _strip(tables["plain.json"])
    assert base.num_rows == 3774
    for name, table in tables.items():
        assert _strip(table).equals(base), name
    meta = traceviz.metadata(tables["trace.json.zst"])
    assert meta["compression"] == "zstd" and meta["rank"] == 0
    # the default group, every rank of the world: kept without its ranks, read back
    world = meta["pg_config"][0]
    assert meta["world_size"] == 2 and world["all_ranks"] and "ranks" not in world
    assert group_ranks(world, meta["world_size"]) == [0, 1]


def test_stdin_to_stdout(tmp_path):
    packed = shared(TRACE).read_bytes()
    proc = subprocess.run([sys.executable, "-m", "traceviz", "parse", "-", "-o", "-", "-q"],
                          input=packed, capture_output=True, check=True)
    out = tmp_path / "out.parquet"
    out.write_bytes(proc.stdout)
    table = pq.read_table(out)
    assert _strip(table).equals(_strip(traceviz.parse_table(shared(TRACE))))
    assert traceviz.metadata(table)["source"] == "<stdin>"


def test_cpu_table_and_load_round_trip(tmp_path):
    out = tmp_path / "r.parquet"
    subprocess.run([sys.executable, "-m", "traceviz", "parse", str(shared(TRACE)), "-o",
                    str(out), "--cpu", "-q"], check=True)
    table = traceviz.load(out)
    cpu = traceviz.load(tmp_path / "r.cpu.parquet")
    assert table.num_rows == 3774
    cats = dict(zip(*[cpu.column("cat").to_pylist()] * 2))
    counts = {c: cpu.column("cat").to_pylist().count(c) for c in cats}
    # every CPU-side complete event of the trace: cpu_op, runtime, user annotations, "Trace"
    assert counts == {"cpu_op": 14346, "cuda_runtime": 8740, "user_annotation": 42, "Trace": 1}
    meta = traceviz.metadata(table)
    assert [s["iteration"] for s in meta["steps"]] == [4, 5, 6]
    assert meta["stats"]["events_by_cat"]["kernel"] == 2700
    assert meta["device_properties"][0]["name"] == "NVIDIA A100-PG509-200"
    assert meta["base_time_ns"] is not None



def test_parquet_encodings(tmp_path):
    """Only dictionary (string) columns are dictionary-encoded in the file (int64 times
    and ids are not: that doubled the file and cost ~70 MB per row group), the times and
    ids in row order are delta-encoded and the other integers plain, and every other
    column has min / max statistics; the table reads back equal to the parsed one."""
    out = tmp_path / "r.parquet"
    parsed = traceviz.parse_trace(shared(TRACE))
    parsed.columns.write_parquet(str(out))
    schema = pq.read_schema(out)
    meta = pq.ParquetFile(out).metadata
    for c in range(meta.num_columns):
        chunk = meta.row_group(0).column(c)
        field = schema.field(chunk.path_in_schema.split(".")[0])
        dictionary = any("DICTIONARY" in e for e in chunk.encodings)
        assert dictionary == pa.types.is_dictionary(field.type), chunk.path_in_schema
        assert chunk.is_stats_set == (not dictionary), chunk.path_in_schema
        delta = "DELTA_BINARY_PACKED" in chunk.encodings
        assert delta == (field.name in DELTA_COLUMNS), chunk.path_in_schema
    assert {"ts", "launch_ts", "correlation", "stream", "index"} <= set(DELTA_COLUMNS)
    assert "dur" not in DELTA_COLUMNS
    assert traceviz.load(out).equals(parsed.activities)


def test_cpu_only_fields_dropped_without_cpu():
    """Without --cpu the scan keeps none of the CPU table's own fields, keeps the others,
    and the GPU table is the same as with --cpu."""
    scanned = reader.scan_trace(shared(TRACE), drop=CPU_ONLY_FIELDS)
    try:
        for store, fields in CPU_ONLY_FIELDS.items():
            kept = set(scanned.stores[store].dtypes) - set(fields)
            for block in scanned.stores[store].sealed:
                assert set(block.columns) == kept
    finally:
        scanned.close()
    plain = traceviz.parse_trace(shared(TRACE)).activities
    with_cpu = traceviz.parse_trace(shared(TRACE), cpu=True).activities
    assert _strip(with_cpu).equals(_strip(plain))


class _FailingStream(io.RawIOBase):
    """Delivers ``data`` in 1 MiB reads, then fails like a disk error."""

    def __init__(self, data: bytes, fail_after: int) -> None:
        self._data = data
        self._fail_after = fail_after
        self.delivered = 0

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        if self.delivered >= self._fail_after:
            raise OSError(5, "Input/output error")
        k = min(len(b), 1 << 20, len(self._data) - self.delivered)
        b[:k] = self._data[self.delivered:self.delivered + k]
        self.delivered += k
        return k


def test_read_error_names_the_byte_offset():
    data = read_bytes(shared(TRACE))
    stream = _FailingStream(data, fail_after=3 << 20)
    with pytest.raises(TraceError) as err:
        traceviz.parse_table(stream)
    assert f"byte {stream.delivered}: read failed" in str(err.value)
    assert "Input/output error" in str(err.value)
