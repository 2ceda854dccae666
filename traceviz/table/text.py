"""Text helpers every layer shows names with."""
from __future__ import annotations


def middle_cut(text: str, width: int) -> str:
    """``text`` cut in the middle to ``width`` characters (an ellipsis where it is cut):
    kernel names differ at both ends."""
    return text if len(text) <= width else text[: width // 2 - 1] + "…" + text[-(width // 2):]
