"""Facts about collective metadata as Kineto records it (``record_param_comms`` args)."""
from __future__ import annotations

import re

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
