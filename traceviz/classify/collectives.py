"""Collective metadata as Kineto records it (``record_param_comms`` args and kernel args):
element sizes, rank lists, the group facts completed from ``pg_config``, and the
collective type of each communication activity."""
from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np

from ..table.schema import COLLECTIVES
from .kinds import first_match
from .patterns import Patterns

# c10::ScalarType names as Kineto writes them in the `dtype` arg -> bytes per element
DTYPE_BYTES = {
    "Byte": 1, "Char": 1, "Bool": 1, "Short": 2, "Int": 4, "Long": 8,
    "Half": 2, "BFloat16": 2, "Float": 4, "Double": 8,
    "ComplexHalf": 4, "ComplexFloat": 8, "ComplexDouble": 16,
    "UInt16": 2, "UInt32": 4, "UInt64": 8,
    "QInt8": 1, "QUInt8": 1, "QInt32": 4, "QUInt4x2": 1, "QUInt2x4": 1,
    "Float8_e4m3fn": 1, "Float8_e5m2": 1, "Float8_e4m3fnuz": 1, "Float8_e5m2fnuz": 1,
    "Float8_e8m0fnu": 1, "Float4_e2m1fn_x2": 1,
}
_INT = re.compile(r"-?\d+")


def dtype_bytes(dtype: str | None) -> int | None:
    """Bytes per element of a Kineto dtype name (None when unknown)."""
    if not dtype:
        return None
    return DTYPE_BYTES.get(dtype) or DTYPE_BYTES.get(dtype[:1].upper() + dtype[1:])


def parse_ranks(text: str | None) -> list[int] | None:
    """Global ranks from a ``Process Group Ranks`` value such as ``"[0, 1, 2]"``.

    Kineto truncates long lists (``"[0, 1, ..., 63]"``); such a list is incomplete and
    yields None, as does an empty or unparsable one.
    """
    if not text or "..." in text:
        return None
    ranks = [int(x) for x in _INT.findall(text)]
    return ranks or None


def group_facts(texts: Sequence[str], dist: dict, pg_name: np.ndarray, pg_desc: np.ndarray,
                pg_ranks: np.ndarray, group_size: np.ndarray
                ) -> tuple[list, np.ndarray, np.ndarray, list[str]]:
    """Group ranks, size and description of rows with collective metadata, completed from
    ``distributedInfo.pg_config``. Returns (ranks lists, sizes, description codes into
    the returned description texts); -1 / None where unknown. ``pg_name`` ... are
    ids into ``texts`` (-1 absent), ``group_size`` ints (-1 unknown)."""
    config = {str(pg.get("pg_name")): pg for pg in dist.get("pg_config") or []
              if isinstance(pg, dict)}
    k = pg_name.shape[0]
    lists: list[list[int] | None] = [None] * k
    size = group_size.copy()
    desc_code = np.full(k, -1, dtype=np.int64)
    descs: dict[str, int] = {}
    facts: dict[tuple, tuple] = {}
    for j, key in enumerate(zip(pg_name.tolist(), pg_desc.tolist(), pg_ranks.tolist(),
                                group_size.tolist())):
        if key not in facts:
            name_id, desc_id, ranks_id, gsize = key
            pg = config.get(texts[name_id]) if name_id >= 0 else None
            ranks = parse_ranks(texts[ranks_id]) if ranks_id >= 0 else None
            if ranks is None and pg is not None and isinstance(pg.get("ranks"), list):
                ranks = [int(r) for r in pg["ranks"]]
            desc = texts[desc_id] if desc_id >= 0 else None
            if desc is None and pg is not None and pg.get("pg_desc") is not None:
                desc = str(pg["pg_desc"])
            if gsize < 0:
                if pg is not None and isinstance(pg.get("pg_size"), int):
                    gsize = pg["pg_size"]
                elif ranks is not None:
                    gsize = len(ranks)
            facts[key] = (ranks, gsize,
                          -1 if desc is None else descs.setdefault(desc, len(descs)))
        lists[j], size[j], desc_code[j] = facts[key]
    return lists, size, desc_code, list(descs)


def collective_types(texts: Sequence[str], patterns: Patterns, coll_name: np.ndarray,
                     kernel_name: np.ndarray, comm_rows: np.ndarray) -> np.ndarray:
    """Index into COLLECTIVES for ``comm_rows`` (``coll_name`` / ``kernel_name``: ids into
    ``texts``, -1 absent): from the ``Collective name`` arg when the
    patterns know it, else from the kernel name; -1 for other rows and unknowns."""
    code_of = {c: i for i, c in enumerate(COLLECTIVES)}
    out = np.full(coll_name.shape[0], -1, dtype=np.int32)

    def assign(ids: np.ndarray, rows: np.ndarray) -> None:
        if not rows.any():
            return
        uniq = np.unique(ids[rows])
        names = first_match([texts[i] for i in uniq.tolist()], patterns.collectives)
        lut = np.array([code_of[c] if c else -1 for c in names], dtype=np.int32)
        out[rows] = lut[np.searchsorted(uniq, ids[rows])]

    assign(coll_name, comm_rows & (coll_name >= 0))
    assign(kernel_name, comm_rows & (out < 0))
    return out
