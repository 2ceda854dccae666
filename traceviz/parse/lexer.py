"""Byte-level JSON primitives for the numba scanner.

Every function takes the byte buffer ``buf`` (``uint8`` array), a position ``i`` and the
number of valid bytes ``n``; none allocates, so all are compiled without numba's
runtime (``_nrt=False``: no reference counting of ``buf`` per call, see
:mod:`.scanner`). Positions are indices into ``buf``.

Return conventions shared by all functions here:

* an end position ``>= 0`` is the index just past what was read;
* ``INCOMPLETE`` (-1) means the buffer ended before the token did (more bytes may complete it);
* ``SYNTAX`` (-2) means the bytes cannot be JSON at this point.

Strings are hashed over their decoded UTF-8 bytes (escapes resolved, quotes excluded),
eight bytes at a time: each full little-endian 64-bit word of the bytes is XORed into
the state and the state mixed (splitmix64's finalizer: a bijection with full avalanche,
so the 64-bit hash can stand for the string, see :mod:`.strings`), then the tail word
(the last 0-7 bytes, zero-padded, with the length's low byte as its top byte) the same
way. The scanner loads eight bytes at once and finds the first quote or backslash among
them with bit arithmetic: a string without escapes is hashed a word at a time, its end
found in the word that holds it; escapes go a byte at a time into the same words.
Arithmetic is ``uint64`` (signed overflow is undefined behaviour for LLVM, so wrapping
arithmetic must be unsigned); the hash is returned as the same bits in an ``int64``.
:func:`string_hash` is the same hash in Python for building key constants.
"""
from __future__ import annotations

import sys

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import config as numba_config
from numba.extending import intrinsic

INCOMPLETE = -1
SYNTAX = -2

# the hash's start and splitmix64's finalizer constants
_SEED = 0x9E3779B97F4A7C15
_M1 = 0xBF58476D1CE4E5B9
_M2 = 0x94D049BB133111EB
_MASK = 0xFFFFFFFFFFFFFFFF
SEED = np.uint64(_SEED)
M1 = np.uint64(_M1)
M2 = np.uint64(_M2)
_ONES = np.uint64(0x0101010101010101)
_HIGHS = np.uint64(0x8080808080808080)
_QUOTES = np.uint64(0x2222222222222222)
_BACKSLASHES = np.uint64(0x5C5C5C5C5C5C5C5C)
if sys.byteorder != "little":  # the words of the hash are loaded little-endian
    raise ImportError("traceviz's scanner needs a little-endian machine")

# number parse status
NUM_OK = 0
NUM_BAD = 1  # not a number
NUM_RANGE = 2  # a number beyond the int64 range once scaled

_QUOTE = 34
_BACKSLASH = 92
_MAX_DIV10 = 922337203685477580  # (2**63 - 1) // 10
_INT64_MAX = 9223372036854775807


def _py_mix(h: int, word: int) -> int:
    """:func:`_mix` on Python ints (for :func:`string_hash`)."""
    x = h ^ word
    x = ((x ^ (x >> 30)) * _M1) & _MASK
    x = ((x ^ (x >> 27)) * _M2) & _MASK
    return x ^ (x >> 31)


def string_hash(data: bytes) -> int:
    """The hash of ``data`` (decoded bytes) as a signed int64, identical to
    :func:`scan_string`'s and :func:`hash_bytes`'."""
    h = _SEED
    full = len(data) // 8 * 8
    for k in range(0, full, 8):
        h = _py_mix(h, int.from_bytes(data[k:k + 8], "little"))
    h = _py_mix(h, int.from_bytes(data[full:], "little") | (len(data) & 0xFF) << 56)
    return h - (1 << 64) if h >= (1 << 63) else h


@intrinsic
def _load_word(_typingctx, buf, i):
    """The 8 bytes ``buf[i:i+8]`` as one little-endian ``uint64`` (one unaligned load;
    the caller checked they are in the buffer)."""
    if not (isinstance(buf, types.Array) and buf.dtype == types.uint8
            and isinstance(i, types.Integer)):
        return None

    def codegen(context, builder, signature, args):
        data = context.make_array(signature.args[0])(context, builder, args[0]).data
        at = builder.gep(data, [args[1]])
        return builder.load(builder.bitcast(at, ir.IntType(64).as_pointer()), align=1)

    return types.uint64(buf, i), codegen


@intrinsic
def _trailing_zeros(_typingctx, v):
    """The number of trailing zero bits of the ``uint64`` ``v`` (64 if it is 0)."""
    if v != types.uint64:
        return None

    def codegen(context, builder, signature, args):
        return builder.cttz(args[0], ir.Constant(ir.IntType(1), 0))

    return types.uint64(v), codegen


def _py_load_word(buf, i):
    """:func:`_load_word` in Python (numba's functions run as Python: ``startup``)."""
    return np.uint64(int.from_bytes(buf[i:i + 8].tobytes(), "little"))


def _py_trailing_zeros(v):
    """:func:`_trailing_zeros` in Python."""
    v = int(v)
    return np.uint64(64 if v == 0 else (v & -v).bit_length() - 1)


# an intrinsic is LLVM code, usable compiled only: plain Python gets its twin
load_word = _py_load_word if numba_config.DISABLE_JIT else _load_word
trailing_zeros = _py_trailing_zeros if numba_config.DISABLE_JIT else _trailing_zeros


@njit(nogil=True, cache=True, _nrt=False, inline="always")
def _mix(h, word):
    """The state ``h`` after the 64-bit ``word`` (see the module doc)."""
    x = h ^ word
    x = (x ^ (x >> np.uint64(30))) * M1
    x = (x ^ (x >> np.uint64(27))) * M2
    return x ^ (x >> np.uint64(31))


@njit(nogil=True, cache=True, _nrt=False, inline="always")
def _specials(v):
    """The high bit of each byte of ``v`` that is a quote or a backslash, and maybe of
    bytes above the first such byte (``(x - 0x01..) & ~x & 0x80..`` flags the zero bytes
    of ``x`` exactly up to the first one): 0 when none is, else the first one is the
    lowest flagged byte."""
    q = v ^ _QUOTES
    b = v ^ _BACKSLASHES
    return (((q - _ONES) & ~q) | ((b - _ONES) & ~b)) & _HIGHS


@njit(nogil=True, cache=True, _nrt=False, inline="always")
def _put(h, word, nb, byte):
    """The hash state after one more decoded ``byte``: ``(h, word, nb)``, ``word``
    holding the ``nb`` (< 8) bytes not yet mixed."""
    word |= np.uint64(byte) << np.uint64(8 * nb)
    if nb == 7:
        return _mix(h, word), np.uint64(0), 0
    return h, word, nb + 1


@njit(nogil=True, cache=True, _nrt=False, inline="always")
def _finish(h, word, length):
    """The hash of ``length`` bytes from their state: ``word`` holds the last
    ``length % 8`` of them (see the module doc)."""
    return np.int64(_mix(h, word | (np.uint64(length & 0xFF) << np.uint64(56))))


@njit(nogil=True, cache=True, _nrt=False)
def hash_bytes(buf, start, end):
    """The hash of the raw bytes ``buf[start:end]`` (as they are: no escape decoded)."""
    h = SEED
    i = start
    while i + 8 <= end:
        h = _mix(h, load_word(buf, i))
        i += 8
    word = np.uint64(0)
    nb = 0
    while i < end:
        h, word, nb = _put(h, word, nb, buf[i])
        i += 1
    return _finish(h, word, end - start)


@njit(nogil=True, cache=True, _nrt=False)
def skip_ws(buf, i, n):
    """Index of the first non-whitespace byte at or after ``i`` (``n`` if none)."""
    while i < n and (buf[i] == 32 or buf[i] == 10 or buf[i] == 13 or buf[i] == 9):
        i += 1
    return i


@njit(nogil=True, cache=True, _nrt=False)
def _hex4(buf, i):
    """The value of the 4 hex digits at ``buf[i:i+4]`` (the caller checked they exist),
    -1 if one is not a hex digit."""
    v = 0
    for k in range(4):
        c = int(buf[i + k])  # int: as Python, uint8 arithmetic would wrap
        if 48 <= c <= 57:
            d = c - 48
        elif 97 <= c <= 102:
            d = c - 87
        elif 65 <= c <= 70:
            d = c - 55
        else:
            return -1
        v = v * 16 + d
    return v


@njit(nogil=True, cache=True, _nrt=False)
def _simple_escape(e):
    """The byte a one-letter escape stands for (``\\n`` -> 10), -1 if not one."""
    if e == 34 or e == 92 or e == 47:
        return e
    if e == 98:
        return 8
    if e == 102:
        return 12
    if e == 110:
        return 10
    if e == 114:
        return 13
    if e == 116:
        return 9
    return -1


@njit(nogil=True, cache=True, _nrt=False)
def _put_utf8(h, word, nb, cp):
    """The hash state after the UTF-8 bytes of code point ``cp``."""
    if cp < 0x80:
        return _put(h, word, nb, cp)
    if cp < 0x800:
        h, word, nb = _put(h, word, nb, 0xC0 | (cp >> 6))
        return _put(h, word, nb, 0x80 | (cp & 0x3F))
    if cp < 0x10000:
        h, word, nb = _put(h, word, nb, 0xE0 | (cp >> 12))
    else:
        h, word, nb = _put(h, word, nb, 0xF0 | (cp >> 18))
        h, word, nb = _put(h, word, nb, 0x80 | ((cp >> 12) & 0x3F))
    h, word, nb = _put(h, word, nb, 0x80 | ((cp >> 6) & 0x3F))
    return _put(h, word, nb, 0x80 | (cp & 0x3F))


@njit(nogil=True, cache=True, _nrt=False, inline="always")
def _utf8_length(cp):
    """The number of UTF-8 bytes of code point ``cp``."""
    return 1 if cp < 0x80 else 2 if cp < 0x800 else 3 if cp < 0x10000 else 4


@njit(nogil=True, cache=True, _nrt=False)
def scan_string(buf, i, n):
    """Read the string whose opening quote is at ``i``.

    Returns ``(end, hash, has_escape)``: ``end`` is past the closing quote, or INCOMPLETE.
    The hash is of the decoded text's UTF-8 bytes, so ``"c\\u0061t"`` hashes as
    ``"cat"`` (keys, categories and interned strings mean what JSON says); an invalid
    escape is hashed as written (its decoding fails later, at its offset).
    """
    h = SEED
    word = np.uint64(0)  # the decoded bytes not yet mixed: nb of them
    nb = 0
    length = 0
    esc = False
    i += 1
    while i < n:
        if nb == 0 and i + 8 <= n:  # a word at a time up to the first quote / backslash
            v = load_word(buf, i)
            special = _specials(v)
            if special == np.uint64(0):
                h = _mix(h, v)
                length += 8
                i += 8
                continue
            p = np.int64(trailing_zeros(special) >> np.uint64(3))  # bytes before it
            if p > 0:
                nb = p
                word = v & ((np.uint64(1) << np.uint64(8 * p)) - np.uint64(1))
                length += p
                i += p
        c = buf[i]
        if c == _QUOTE:
            return i + 1, _finish(h, word, length), esc
        if c != _BACKSLASH:
            h, word, nb = _put(h, word, nb, c)
            length += 1
            i += 1
            continue
        esc = True
        if i + 1 >= n:
            return INCOMPLETE, np.int64(0), esc
        e = buf[i + 1]
        if e != 117:  # not \u
            b = _simple_escape(e)
            if b < 0:
                h, word, nb = _put(h, word, nb, c)
                h, word, nb = _put(h, word, nb, e)
                length += 2
            else:
                h, word, nb = _put(h, word, nb, b)
                length += 1
            i += 2
            continue
        if i + 6 > n:
            return INCOMPLETE, np.int64(0), esc
        cp = _hex4(buf, i + 2)
        if cp < 0:
            h, word, nb = _put(h, word, nb, c)
            h, word, nb = _put(h, word, nb, e)
            length += 2
            i += 2
            continue
        i += 6
        if 0xD800 <= cp < 0xDC00:  # a high surrogate: its low half may follow
            if i + 6 > n:
                return INCOMPLETE, np.int64(0), esc
            if buf[i] == _BACKSLASH and buf[i + 1] == 117:
                lo = _hex4(buf, i + 2)
                if 0xDC00 <= lo < 0xE000:
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00)
                    i += 6
        h, word, nb = _put_utf8(h, word, nb, cp)
        length += _utf8_length(cp)
    return INCOMPLETE, np.int64(0), esc


@njit(nogil=True, cache=True, _nrt=False)
def first_char(buf, k, e):
    """The first character of the string ``buf[k:e]`` (quotes included) when it is
    ASCII, escapes decoded (``"\\u0058"`` -> ``X``); 0 if empty or not ASCII."""
    if e - k <= 2:
        return 0
    c = buf[k + 1]
    if c != _BACKSLASH:
        return c if c < 0x80 else 0
    if e - k < 4:
        return 0
    d = buf[k + 2]
    if d != 117:
        b = _simple_escape(d)
        return b if b >= 0 else 0
    if e - k < 8:
        return 0
    cp = _hex4(buf, k + 3)
    return cp if 0 < cp < 0x80 else 0


@njit(nogil=True, cache=True, _nrt=False)
def skip_string(buf, i, n):
    """Like :func:`scan_string` without the hash: the end position or INCOMPLETE (eight
    bytes at a time up to each quote or backslash)."""
    i += 1
    while i < n:
        if i + 8 <= n:
            special = _specials(load_word(buf, i))
            if special == np.uint64(0):
                i += 8
                continue
            i += np.int64(trailing_zeros(special) >> np.uint64(3))
        c = buf[i]
        if c == _QUOTE:
            return i + 1
        if c == _BACKSLASH:
            i += 1
        i += 1
    return INCOMPLETE


@njit(nogil=True, cache=True, _nrt=False)
def _is_delim(c):
    return c == 44 or c == 125 or c == 93 or c == 32 or c == 10 or c == 13 or c == 9 or c == 58


@njit(nogil=True, cache=True, _nrt=False)
def skip_literal(buf, i, n):
    """Skip a number / true / false / null token (loosely: up to the next delimiter)."""
    c = buf[i]
    if not ((48 <= c <= 57) or c == 45 or c == 116 or c == 102 or c == 110
            or c == 78 or c == 73 or c == 43):
        return SYNTAX
    while i < n:
        c = buf[i]
        if _is_delim(c):
            return i
        if c == _QUOTE or c == 123 or c == 91:
            return SYNTAX
        i += 1
    return INCOMPLETE


@njit(nogil=True, cache=True, _nrt=False)
def skip_value(buf, i, n):
    """Skip one JSON value starting at ``i`` (no leading whitespace).

    Objects and arrays are skipped by counting brackets; the kind of each open bracket
    is kept in a 64-bit mask (no allocation), so a mismatched bracket within the first
    64 levels is a SYNTAX error. Scalars inside them are skipped loosely.
    """
    if i >= n:
        return INCOMPLETE
    c = buf[i]
    if c == _QUOTE:
        return skip_string(buf, i, n)
    if c != 123 and c != 91:
        return skip_literal(buf, i, n)
    kinds = np.uint64(0)  # bit d set: the bracket opened at depth d is '{'
    depth = 0
    while i < n:
        c = buf[i]
        if c == _QUOTE:
            i = skip_string(buf, i, n)
            if i < 0:
                return INCOMPLETE
            continue
        elif c == 123 or c == 91:
            if depth < 64:
                bit = np.uint64(1) << np.uint64(depth)
                if c == 123:
                    kinds |= bit
                else:
                    kinds &= ~bit
            depth += 1
        elif c == 125 or c == 93:
            if depth == 0:
                return SYNTAX
            depth -= 1
            if depth < 64:
                is_obj = (kinds >> np.uint64(depth)) & np.uint64(1)
                if (c == 125) != (is_obj == 1):
                    return SYNTAX
            if depth == 0:
                return i + 1
        i += 1
    return INCOMPLETE


@njit(nogil=True, cache=True, _nrt=False)
def decimal_at(buf, i, n, scale):
    """Parse the decimal number at ``i`` and return it times ``10**scale`` as an int64.

    The digits are read exactly (never through float); the result is rounded half away
    from zero to an integer. Accepts ``-?digits(.digits)?([eE][+-]?digits)?`` and a
    leading ``+``. Returns ``(end, value, status)`` where ``end`` is the index after the
    last byte of the number; ``status`` is NUM_OK, NUM_BAD (no digits) or NUM_RANGE (the value
    does not fit in int64: NUM_RANGE).
    """
    neg = False
    if i < n and (buf[i] == 45 or buf[i] == 43):
        neg = buf[i] == 45
        i += 1
    mant = np.int64(0)
    exp10 = 0
    ndigits = 0
    dropped = -1  # first digit that did not fit into the mantissa
    while i < n and 48 <= buf[i] <= 57:
        d = int(buf[i]) - 48
        ndigits += 1
        if mant < _MAX_DIV10 or (mant == _MAX_DIV10 and d <= 7):
            mant = mant * 10 + d
        else:
            exp10 += 1
            if dropped < 0:
                dropped = d
        i += 1
    if i < n and buf[i] == 46:
        i += 1
        while i < n and 48 <= buf[i] <= 57:
            d = int(buf[i]) - 48
            ndigits += 1
            if dropped < 0 and (mant < _MAX_DIV10 or (mant == _MAX_DIV10 and d <= 7)):
                mant = mant * 10 + d
                exp10 -= 1
            elif dropped < 0:
                dropped = d
            i += 1
    if ndigits == 0:
        return i, np.int64(0), NUM_BAD
    if i < n and (buf[i] == 101 or buf[i] == 69):
        i += 1
        eneg = False
        if i < n and (buf[i] == 45 or buf[i] == 43):
            eneg = buf[i] == 45
            i += 1
        e = 0
        edig = 0
        while i < n and 48 <= buf[i] <= 57:
            if e < 100000:
                e = e * 10 + (int(buf[i]) - 48)
            edig += 1
            i += 1
        if edig == 0:
            return i, np.int64(0), NUM_BAD
        exp10 += -e if eneg else e
    total = exp10 + scale
    value = mant
    if total >= 0:
        if value != 0 and total > 19:
            return i, np.int64(0), NUM_RANGE
        for _ in range(total):
            if value > _MAX_DIV10:
                return i, np.int64(0), NUM_RANGE
            value *= 10
        if total == 0 and dropped >= 5:  # the first digit past the mantissa rounds
            value += 1
    elif -total > 19:
        value = 0  # far below one unit
    else:
        div = np.int64(1)
        for _ in range(-total - 1):
            div *= 10
        q = value // div  # the kept digits followed by the first removed digit
        value = q // 10
        if q % 10 >= 5:  # half away from zero: only the first removed digit matters
            value += 1
    if neg:
        value = -value
    return i, value, NUM_OK


@njit(nogil=True, cache=True, _nrt=False, inline="always")
def number_token(buf, i, n, scale):
    """A JSON number token at ``i`` scaled by ``10**scale``: ``(end, value, status)``.

    ``end`` is INCOMPLETE when the buffer ends inside the token and SYNTAX when the token
    is not followed by a delimiter. Plain decimals (``-?digits(.digits)?`` with at most
    ``scale`` fraction digits and at most 18 digits once scaled: nearly every number of
    a trace) are exact without rounding or overflow checks and take a fast path; every
    other form goes through :func:`decimal_at`.
    """
    j = i
    if j < n and buf[j] == 45:
        j += 1
    first = j
    mant = np.uint64(0)  # unsigned: wraps harmlessly on long inputs, which fall through
    while j < n and 48 <= buf[j] <= 57:
        mant = mant * np.uint64(10) + np.uint64(int(buf[j]) - 48)
        j += 1
    n_int = j - first
    n_frac = 0
    if j < n and buf[j] == 46:
        j += 1
        first = j
        while j < n and 48 <= buf[j] <= 57:
            mant = mant * np.uint64(10) + np.uint64(int(buf[j]) - 48)
            j += 1
        n_frac = j - first
    if j < n and n_int > 0 and n_frac <= scale and n_int + scale <= 18 and _is_delim(buf[j]):
        for _ in range(scale - n_frac):
            mant *= np.uint64(10)
        value = np.int64(mant)
        return j, -value if buf[i] == 45 else value, NUM_OK
    return _general_number_token(buf, i, n, scale)


@njit(nogil=True, cache=True, _nrt=False)
def _general_number_token(buf, i, n, scale):
    """:func:`number_token` for any number form (exponents, rounding, overflow)."""
    j, v, st = decimal_at(buf, i, n, scale)
    if j >= n:
        return INCOMPLETE, v, st
    if not _is_delim(buf[j]):
        k = skip_literal(buf, i, n)
        if k == INCOMPLETE:
            return INCOMPLETE, v, NUM_BAD
        if k < 0:
            return SYNTAX, v, NUM_BAD
        return k, np.int64(0), NUM_BAD
    return j, v, st


@njit(nogil=True, cache=True, _nrt=False)
def string_number(buf, start, end, scale):
    """Parse the raw string content ``buf[start:end]`` as a decimal: ``(value, status)``.

    Surrounding spaces are allowed; anything else after the number makes it NUM_BAD.
    """
    start = skip_ws(buf, start, end)
    j, v, st = decimal_at(buf, start, end, scale)
    j = skip_ws(buf, j, end)
    if j != end:
        return np.int64(0), NUM_BAD
    return v, st
