"""Reading a pickle that must hold plain data only (dicts, lists, tuples, strings, bytes,
numbers, booleans, None), in time and memory bounded by its file, whatever it says.

A pass over the opcodes (numba, before anything is unpickled) simulates the unpickler's
stack by kind and refuses, naming the byte offset:

* every opcode that names or calls code or builds another object (globals, reduce,
  build, extensions, persistent ids, sets, out-of-band buffers) and the text opcodes of
  protocol 0 (no dump is written with them);
* a memo index beyond the number of values memoized so far (the C unpickler allocates
  16 bytes up to the largest index a file names: one 9-byte ``LONG_BINPUT`` would take
  gigabytes), and a read of a memo slot never written;
* a dict key that is not a string (a tuple key could hash a structure of shared
  references in exponential time, integer keys can be chosen to share one hash and
  build a dict in quadratic time; strings hash with a per-process random seed), more
  than :data:`MAX_OBJECTS` values built (memory stays within ~50 bytes a value), and a
  length running past the file's end.

What passes is unpickled by CPython's C unpickler, which still refuses every global.
Structures that share references (one list referenced a million times) pass: their
memory is what the file holds; whoever walks them bounds the walk (see
:mod:`.flight_recorder`).
"""
from __future__ import annotations

import pickle
import pickletools
from typing import Any

import numpy as np
from numba import njit

# kinds on the simulated stack
_SCALAR, _CONTAINER, _MARK, _TEXT = 1, 2, 3, 4
# outcomes of the opcode pass (>= 0: accepted)
_REFUSED, _BAD_MEMO, _BAD_KEY, _CUT, _BAD_STACK, _TOO_MANY = -1, -2, -3, -4, -5, -6
MAX_OBJECTS = 16_000_000  # values a pickle may build (~50 bytes each in memory)
_REASONS = {
    _REFUSED: "an opcode that names or calls code, builds an object or is protocol 0 text "
              "(only plain data is read)",
    _BAD_MEMO: "a memo index the pickle never wrote (a damaged or hostile pickle)",
    _BAD_KEY: "a dict key that is not a string",
    _CUT: "a length running past the end of the file",
    _BAD_STACK: "an opcode without its operands (a damaged pickle)",
    _TOO_MANY: f"more than {MAX_OBJECTS:,} values (more than a dump holds)",
}


class PickleRefused(ValueError):
    """The pickle is not plain data bounded by its file; ``offset``: the byte where the
    check stopped, ``cut``: it ends early."""

    def __init__(self, message: str, offset: int, cut: bool = False):
        super().__init__(message)
        self.offset = offset
        self.cut = cut


def load_plain(raw: bytes) -> Any:
    """The plain data of the pickle ``raw`` (see the module doc); :class:`PickleRefused`
    where it is not."""
    code, offset = _check(np.frombuffer(raw, dtype=np.uint8), MAX_OBJECTS)
    if code == _REFUSED and raw[offset] in (0x93, 0x63):  # STACK_GLOBAL / GLOBAL
        named = _global_name(raw, offset)
        if named:
            raise PickleRefused(f"it names {named}, and only plain data (dicts, lists, "
                                "strings, numbers) is read", offset)
    if code < 0:
        raise PickleRefused(_REASONS[code], offset, cut=code == _CUT)
    try:
        return _Plain(raw).load()
    except pickle.UnpicklingError as exc:
        raise PickleRefused(str(exc), offset) from None


def _global_name(raw: bytes, offset: int) -> str | None:
    """``module.name`` of the global at ``offset`` (every opcode before it passed the
    check), where the first MiB holds it; None otherwise."""
    if offset >= 1 << 20:
        return None
    texts: list[str] = []
    memo: dict[int, str] = {}
    try:
        for op, arg, pos in pickletools.genops(raw[:offset + 1]):
            if pos == offset:
                if op.name == "GLOBAL":
                    return str(arg).replace(" ", ".")
                return ".".join(texts[-2:]) if len(texts) >= 2 else None
            if isinstance(arg, str) and "UNICODE" in op.name:
                texts.append(arg)
            elif op.name == "MEMOIZE" and texts:
                memo[len(memo)] = texts[-1]
            elif op.name.endswith("GET") and arg in memo:
                texts.append(memo[arg])
    except ValueError:
        return None
    return None


class _Plain(pickle.Unpickler):
    """C unpickler that refuses every global (the opcode pass refused them first)."""

    def __init__(self, raw: bytes):
        import io

        super().__init__(io.BytesIO(raw))

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"it names {module}.{name}, and only plain data "
                                     "(dicts, lists, strings, numbers) is read")


@njit(cache=True)
def _u32(b, i):  # pragma: no cover - compiled
    return (np.int64(b[i]) | (np.int64(b[i + 1]) << 8) | (np.int64(b[i + 2]) << 16)
            | (np.int64(b[i + 3]) << 24))


@njit(cache=True)
def _u64(b, i):  # pragma: no cover - compiled
    v = np.int64(0)
    for k in range(7, -1, -1):
        if k == 7 and b[i + k] >= 128:
            return np.int64(-1)  # beyond int64: past any file
        v = (v << 8) | np.int64(b[i + k])
    return v


@njit(cache=True)
def _check(b, max_objects):  # pragma: no cover - compiled
    """(outcome, byte offset): outcome >= 0 the number of opcodes of an accepted
    pickle, else one of the refusals above."""
    n = b.shape[0]
    stack = np.zeros(n + 1, np.int8)
    marks = np.zeros(n + 1, np.int32)
    memo = np.zeros(n + 1, np.int8)
    objects = 0
    sp = 0
    mp = 0
    memo_n = 0
    ops = 0
    i = 0
    while i < n:
        op = b[i]
        at = i
        i += 1
        ops += 1
        push = 0           # kind pushed after the pops
        pops = 0
        skip = np.int64(0)  # argument bytes after the opcode
        if op == 0x2E:     # STOP
            if sp != 1 or mp != 0:
                return _BAD_STACK, at
            return ops, at
        elif op == 0x80:   # PROTO
            skip = 1
        elif op == 0x95:   # FRAME: an 8-byte length, the frame's opcodes follow
            if i + 8 > n:
                return _CUT, at
            skip = 8
        elif op == 0x4E or op == 0x88 or op == 0x89:  # NONE NEWTRUE NEWFALSE
            push = _SCALAR
        elif op == 0x4B:   # BININT1
            skip, push = 1, _SCALAR
        elif op == 0x4D:   # BININT2
            skip, push = 2, _SCALAR
        elif op == 0x4A:   # BININT
            skip, push = 4, _SCALAR
        elif op == 0x47:   # BINFLOAT
            skip, push = 8, _SCALAR
        elif op == 0x8A or op == 0x55 or op == 0x43 or op == 0x8C:
            # LONG1 SHORT_BINSTRING SHORT_BINBYTES SHORT_BINUNICODE: 1-byte length
            if i + 1 > n:
                return _CUT, at
            skip, push = 1 + np.int64(b[i]), _TEXT if op == 0x8C else _SCALAR
        elif op == 0x8B or op == 0x54 or op == 0x42 or op == 0x58:
            # LONG4 BINSTRING BINBYTES BINUNICODE: 4-byte length
            if i + 4 > n:
                return _CUT, at
            skip, push = 4 + _u32(b, i), _TEXT if op == 0x58 else _SCALAR
        elif op == 0x8D or op == 0x8E:  # BINUNICODE8 BINBYTES8
            if i + 8 > n:
                return _CUT, at
            length = _u64(b, i)
            if length < 0:
                return _CUT, at
            skip, push = 8 + length, _TEXT if op == 0x8D else _SCALAR
        elif op == 0x5D or op == 0x7D or op == 0x29:  # EMPTY_LIST EMPTY_DICT EMPTY_TUPLE
            push = _CONTAINER
        elif op == 0x28:   # MARK
            marks[mp] = sp
            mp += 1
            stack[sp] = _MARK
            sp += 1
        elif op == 0x6C or op == 0x74 or op == 0x64 or op == 0x65 or op == 0x75 \
                or op == 0x31:  # LIST TUPLE DICT APPENDS SETITEMS POP_MARK
            if mp == 0:
                return _BAD_STACK, at
            mp -= 1
            base = marks[mp]
            if op == 0x64 or op == 0x75:  # the keys: every other item
                for k in range(base + 1, sp, 2):
                    if stack[k] != _TEXT:
                        return _BAD_KEY, at
            sp = base
            if op == 0x6C or op == 0x74 or op == 0x64:
                push = _CONTAINER
            elif op == 0x65 or op == 0x75:
                if sp == 0 or stack[sp - 1] != _CONTAINER:
                    return _BAD_STACK, at
        elif op == 0x85 or op == 0x86 or op == 0x87:  # TUPLE1 TUPLE2 TUPLE3
            pops, push = np.int64(op - 0x84), _CONTAINER
        elif op == 0x61:   # APPEND
            pops = 1
        elif op == 0x73:   # SETITEM
            if sp < 3 or stack[sp - 2] != _TEXT:
                return _BAD_KEY if sp >= 3 else _BAD_STACK, at
            pops = 2
        elif op == 0x30:   # POP
            pops = 1
        elif op == 0x32:   # DUP
            if sp == 0:
                return _BAD_STACK, at
            push = stack[sp - 1]
        elif op == 0x71 or op == 0x72:  # BINPUT LONG_BINPUT
            width = 1 if op == 0x71 else 4
            if i + width > n:
                return _CUT, at
            idx = np.int64(b[i]) if width == 1 else _u32(b, i)
            if idx > memo_n or sp == 0 or stack[sp - 1] == _MARK:
                return _BAD_MEMO, at
            memo[idx] = stack[sp - 1]
            if idx == memo_n:
                memo_n += 1
            skip = width
        elif op == 0x94:   # MEMOIZE
            if sp == 0 or stack[sp - 1] == _MARK:
                return _BAD_MEMO, at
            memo[memo_n] = stack[sp - 1]
            memo_n += 1
        elif op == 0x68 or op == 0x6A:  # BINGET LONG_BINGET
            width = 1 if op == 0x68 else 4
            if i + width > n:
                return _CUT, at
            idx = np.int64(b[i]) if width == 1 else _u32(b, i)
            if idx >= memo_n:
                return _BAD_MEMO, at
            skip, push = width, memo[idx]
        else:              # code, objects, sets, buffers, protocol 0 text, unknown
            return _REFUSED, at
        if pops:
            if sp < pops:
                return _BAD_STACK, at
            for k in range(sp - pops, sp):
                if stack[k] == _MARK:
                    return _BAD_STACK, at
            sp -= pops
            if op == 0x61 or op == 0x73:
                if sp == 0 or stack[sp - 1] != _CONTAINER:
                    return _BAD_STACK, at
        if push:
            if op != 0x68 and op != 0x6A and op != 0x32 and op != 0x4E and op != 0x88 \
                    and op != 0x89:  # a new value (not a reference, None or a boolean)
                objects += 1
                if objects > max_objects:
                    return _TOO_MANY, at
            stack[sp] = push
            sp += 1
        if skip > n - i:
            return _CUT, at
        i += skip
    return _CUT, n
