"""A tiny JSON writer for tests: raw number text, and minified or pretty layouts.

``Raw("1.25e3")`` is written verbatim, so tests can put every JSON number form (and the
exact decimal text the reference reads) into a trace.
"""
from __future__ import annotations

import json


class Raw(str):
    """A JSON token written as is (a number in any textual form)."""


def dumps(obj, indent: int | None = None, space: str = " ", level: int = 0) -> str:
    """``indent=None``: minified (``space`` after ':' and ','); else Kineto-like pretty."""
    if isinstance(obj, Raw):
        return str(obj)
    if isinstance(obj, dict):
        if not obj:
            return "{}"
        items = [json.dumps(k) + ":" + space + dumps(v, indent, space, level + 1)
                 for k, v in obj.items()]
        if indent is None:
            return "{" + ("," + space).join(items) + "}"
        pad = "\n" + " " * (indent * (level + 1))
        return "{" + pad + ("," + pad).join(items) + "\n" + " " * (indent * level) + "}"
    if isinstance(obj, list):
        if not obj:
            return "[]"
        items = [dumps(v, indent, space, level + 1) for v in obj]
        if indent is None:
            return "[" + ("," + space).join(items) + "]"
        pad = "\n" + " " * (indent * (level + 1))
        return "[" + pad + ("," + pad).join(items) + "\n" + " " * (indent * level) + "]"
    return json.dumps(obj)
