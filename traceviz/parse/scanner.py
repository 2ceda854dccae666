"""The numba state machine that turns Kineto trace bytes into column blocks.

:func:`scan` reads one buffer from ``w[ST_POS]`` and returns a status (``R_*`` in
:mod:`.layout`) whenever it needs the driver: more bytes (an event straddles the end of
the buffer), a full column block, a bigger string or thread table, spans to decode, the
end of the trace, or an error. It is restartable: its state lives in the packed arrays
described in :mod:`.layout`, and the driver re-calls it after doing what the status
asked. An event is committed only when its closing brace has been read, so a restart
never duplicates or loses an event.

What it reads (everything else is skipped structurally, never decoded):

* the top level: an object (keys before and after ``traceEvents`` are recorded as byte
  spans for :mod:`.header`) or a bare array of events (torch_npu / Ascend);
* per event: ``ph name cat pid tid ts dur id bp args``; ``ts``/``dur`` as numbers or
  numeric strings, in microseconds, converted exactly to int64 ns;
* per ``args``: the keys in :data:`.layout.ARG_KEYS`; an allocator event's ``Bytes``,
  ``Addr`` and ``Device Id`` only as exact integers (:data:`.fields.UNREADABLE` when
  absent, fractional, out of range or not a number).

Performance notes (numba specifics, measured on this code): the scanner and every
helper it calls are compiled with ``_nrt=False``. They allocate nothing, and with the
runtime on every call with an array argument made two out-of-line atomic reference-count
calls per array: ~40 % of the scan time. The number readers are inlined
(``inline="always"``): a call passes each array as a 7-word struct on the stack and
returns its tuple through memory, and numbers are ~6 calls per event (~17 % of the
scan; inlining the string, whitespace, intern and args helpers measured no gain). The
state is packed into a few arrays; a helper loop that exits with ``break`` is not
inlined by LLVM, so hot helpers exit with ``return`` or a loop condition; wrapping
arithmetic (hashes) is ``uint64``, because LLVM treats signed overflow as undefined.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from . import fields as L
from .lexer import (
    INCOMPLETE,
    NUM_OK,
    NUM_RANGE,
    SYNTAX,
    first_char,
    hash_bytes,
    number_token,
    scan_string,
    skip_string,
    skip_value,
    skip_ws,
    string_number,
)
from .strings import intern

NEED_ROOM = -3  # an event could not intern a string: the string table must grow first

# per-event scratch, at w[L.W_EV + V_*]
(V_PH, V_NAME, V_CAT, V_TS, V_TSST, V_DUR, V_DURST, V_PIDN, V_PIDS, V_TIDN, V_TIDS, V_ID,
 V_IDST, V_BP, V_SPARE) = range(L.N_EV)
# number-field status
MISSING, GOOD, BAD, RANGE = 0, 1, 2, 3
INT64_MAX = np.int64(2 ** 63 - 1)

_STR_TAG = np.uint64(0x5BD1E9955BD1E995)
_MIX1 = np.uint64(0x9E3779B97F4A7C15)
_MIX2 = np.uint64(0xBF58476D1CE4E5B9)
_MIX3 = np.uint64(0x94D049BB133111EB)
EV = L.W_EV
AR = L.W_ARG


@njit(nogil=True, cache=True, _nrt=False, inline="always")
def _lookup(w, table, h):
    """Value stored for hash ``h`` in key table ``table`` of ``w`` (-1: none)."""
    if h == 0:
        h = np.int64(1)
    base = L.W_TAB + 2 * table * L.TAB_SIZE
    mask = L.TAB_SIZE - 1
    slot = h & mask
    while True:
        k = w[base + slot]
        if k == h:
            return w[base + L.TAB_SIZE + slot]
        if k == 0:
            return np.int64(-1)
        slot = (slot + 1) & mask


@njit(nogil=True, cache=True, _nrt=False, inline="always")
def _room(w, strs, pend):
    return w[L.W_NSTR] * 2 + 4 <= strs.shape[0] and w[L.W_NPEND] + 1 <= pend.shape[1]


@njit(nogil=True, cache=True, _nrt=False, inline="always")
def _number_field(buf, k, n, scale):
    """A number field (JSON number or numeric string) at ``k``: ``(end, value, status)``."""
    c = buf[k]
    if c == 34:
        e = skip_string(buf, k, n)
        if e < 0:
            return e, np.int64(0), BAD
        v, st = string_number(buf, k + 1, e - 1, scale)
        return e, v, GOOD if st == NUM_OK else RANGE if st == NUM_RANGE else BAD
    if c == 123 or c == 91:
        return skip_value(buf, k, n), np.int64(0), BAD
    e, v, st = number_token(buf, k, n, scale)
    return e, v, GOOD if st == NUM_OK else RANGE if st == NUM_RANGE else BAD


@njit(nogil=True, cache=True, _nrt=False, inline="always")
def _exact_arg(slot):
    """Whether arg ``slot`` is read as an exact integer (never rounded; absent or
    unreadable: ``UNREADABLE``, not -1): an allocator event's Bytes, Addr, Device Id."""
    return slot == L.A_MEM_BYTES or slot == L.A_ADDR or slot == L.A_DEVICE_ID


@njit(nogil=True, cache=True, _nrt=False)
def _integral(buf, k, e):
    """Whether the number ``buf[k:e]`` (a JSON number or numeric string, read without
    error) is an integer: ``value = digits * 10**(exponent - fraction digits)`` is one
    when the digits' trailing zeros make up for a negative power (``2.0``, ``15e1``:
    yes; ``1.5``, ``15e-1``: no)."""
    frac = 0  # digits after the decimal point
    zeros = 0  # trailing zero digits of the mantissa
    nonzero = False
    in_frac = False
    in_exp = False
    eneg = False
    exp = 0
    for q in range(k, e):
        c = buf[q]
        if in_exp:
            if c == 45:
                eneg = True
            elif 48 <= c <= 57 and exp < 100000:
                exp = exp * 10 + (int(c) - 48)
        elif c == 46:
            in_frac = True
        elif c == 101 or c == 69:
            in_exp = True
        elif 48 <= c <= 57:
            if in_frac:
                frac += 1
            if c == 48:
                zeros += 1
            else:
                zeros = 0
                nonzero = True
    return not nonzero or (-exp if eneg else exp) - frac + zeros >= 0


@njit(nogil=True, cache=True, _nrt=False)
def _parse_args(buf, i, n, w, strs, sinfo, pend):
    """Parse the ``args`` object at ``i`` into ``w[AR + A_*]``; the end or a negative code."""
    i = skip_ws(buf, i + 1, n)
    if i >= n:
        return INCOMPLETE
    if buf[i] == 125:
        return i + 1
    while True:
        if buf[i] != 34:
            w[L.ST_ERRPOS] = i
            return SYNTAX
        j, h, _esc = scan_string(buf, i, n)
        if j < 0:
            return INCOMPLETE
        k = skip_ws(buf, j, n)
        if k >= n:
            return INCOMPLETE
        if buf[k] != 58:
            w[L.ST_ERRPOS] = k
            return SYNTAX
        k = skip_ws(buf, k + 1, n)
        if k >= n:
            return INCOMPLETE
        slot = _lookup(w, L.T_ARG, h)
        if slot < 0:
            e = skip_value(buf, k, n)
        elif slot < L.FIRST_STR_ARG:
            e, v, vst = _number_field(buf, k, n, 0)
            if e >= 0:
                if vst == GOOD and (not _exact_arg(slot) or _integral(buf, k, e)):
                    w[AR + slot] = v
                else:
                    w[L.S_BAD_NUMBER] += 1
        else:
            c = buf[k]
            if c == 34:
                e, h2, _esc2 = scan_string(buf, k, n)
                if e >= 0:
                    if not _room(w, strs, pend):
                        return NEED_ROOM
                    w[AR + slot] = intern(strs, sinfo, pend, w, h2, k + 1, e - k - 2,
                                          w[L.W_MAXSTR])
            elif c != 123:  # a list (e.g. Process Group Ranks) or a number: its text
                e = skip_value(buf, k, n)
                if e >= 0:
                    if not _room(w, strs, pend):
                        return NEED_ROOM
                    w[AR + slot] = intern(strs, sinfo, pend, w, hash_bytes(buf, k, e), k, e - k,
                                          w[L.W_MAXSTR])
            else:
                e = skip_value(buf, k, n)
        if e < 0:
            if e == SYNTAX:
                w[L.ST_ERRPOS] = k
            return e
        i = skip_ws(buf, e, n)
        if i >= n:
            return INCOMPLETE
        c = buf[i]
        if c == 44:
            i = skip_ws(buf, i + 1, n)
            if i >= n:
                return INCOMPLETE
            continue
        if c == 125:
            return i + 1
        w[L.ST_ERRPOS] = i
        return SYNTAX


@njit(nogil=True, cache=True, _nrt=False)
def _parse_event(buf, i, n, w, strs, sinfo, pend):
    """Parse the event object whose ``{`` is at ``i`` into the scratch slots of ``w``."""
    for q in range(L.N_EV):
        w[EV + q] = -1
    for q in range(L.N_ARGS):
        w[AR + q] = -1
    w[AR + L.A_MEM_BYTES] = L.UNREADABLE
    w[AR + L.A_ADDR] = L.UNREADABLE
    w[AR + L.A_DEVICE_ID] = L.UNREADABLE
    w[EV + V_TSST] = MISSING
    w[EV + V_DURST] = MISSING
    w[EV + V_IDST] = MISSING
    w[EV + V_PH] = 0
    w[EV + V_BP] = 0
    i = skip_ws(buf, i + 1, n)
    if i >= n:
        return INCOMPLETE
    if buf[i] == 125:
        return i + 1
    while True:
        if buf[i] != 34:
            w[L.ST_ERRPOS] = i
            return SYNTAX
        j, h, _esc = scan_string(buf, i, n)
        if j < 0:
            return INCOMPLETE
        k = skip_ws(buf, j, n)
        if k >= n:
            return INCOMPLETE
        if buf[k] != 58:
            w[L.ST_ERRPOS] = k
            return SYNTAX
        k = skip_ws(buf, k + 1, n)
        if k >= n:
            return INCOMPLETE
        key = _lookup(w, L.T_EVENT, h)
        c = buf[k]
        if key == L.K_TS or key == L.K_DUR:
            e, v, vst = _number_field(buf, k, n, 3)
            slot = V_TS if key == L.K_TS else V_DUR
            w[EV + slot] = v
            w[EV + slot + 1] = vst  # V_TSST / V_DURST follow their values
        elif key == L.K_NAME or key == L.K_CAT:
            if c == 34:
                e, h2, _esc2 = scan_string(buf, k, n)
                if e >= 0:
                    if not _room(w, strs, pend):
                        return NEED_ROOM
                    cap = w[L.W_MAXSTR]
                    if key == L.K_CAT and w[L.W_NSTR] >= cap and _lookup(w, L.T_CAT, h2) >= 0:
                        cap = w[L.W_NSTR] + 1  # a category traceviz reads never folds
                    sid = intern(strs, sinfo, pend, w, h2, k + 1, e - k - 2, cap)
                    if key == L.K_NAME:
                        w[EV + V_NAME] = sid
                    else:
                        w[EV + V_CAT] = sid
                        if sinfo[L.SI_CLASS, sid] < 0:
                            cls = _lookup(w, L.T_CAT, h2)
                            sinfo[L.SI_CLASS, sid] = L.CLS_OTHER if cls < 0 else cls
            else:
                e = skip_value(buf, k, n)
        elif key == L.K_PH:
            if c == 34:
                e = skip_string(buf, k, n)
                if e >= 0:
                    w[EV + V_PH] = first_char(buf, k, e)
            else:
                e = skip_value(buf, k, n)
        elif key == L.K_PID or key == L.K_TID:
            num = np.int64(-1)
            sid = np.int64(-1)
            if c == 34:
                e, h2, _esc2 = scan_string(buf, k, n)
                if e >= 0:
                    v, vst = string_number(buf, k + 1, e - 1, 0)
                    if vst == NUM_OK:
                        num = v
                    else:
                        if not _room(w, strs, pend):
                            return NEED_ROOM
                        sid = intern(strs, sinfo, pend, w, h2, k + 1, e - k - 2,
                                     w[L.W_MAXSTR])
            else:
                e, v, vst = _number_field(buf, k, n, 0)
                if vst == GOOD:
                    num = v
            slot = V_PIDN if key == L.K_PID else V_TIDN
            w[EV + slot] = num
            w[EV + slot + 1] = sid  # V_PIDS / V_TIDS follow their numbers
        elif key == L.K_ID:
            if c == 34:  # a numeric string is its number, any other string its hash
                e, h2, _esc2 = scan_string(buf, k, n)
                if e >= 0:
                    v, vst = string_number(buf, k + 1, e - 1, 0)
                    w[EV + V_ID] = v if vst == NUM_OK else h2
                    w[EV + V_IDST] = GOOD
            else:
                e, v, vst = _number_field(buf, k, n, 0)
                w[EV + V_ID] = v
                w[EV + V_IDST] = vst
        elif key == L.K_BP:
            e = skip_value(buf, k, n)
            if c == 34 and e >= 0:
                w[EV + V_BP] = first_char(buf, k, e)
        elif key == L.K_ARGS and c == 123:
            e = _parse_args(buf, k, n, w, strs, sinfo, pend)
        else:
            e = skip_value(buf, k, n)
        if e < 0:
            if e == SYNTAX and w[L.ST_ERRPOS] < k:
                w[L.ST_ERRPOS] = k
            return e
        i = skip_ws(buf, e, n)
        if i >= n:
            return INCOMPLETE
        c = buf[i]
        if c == 44:
            i = skip_ws(buf, i + 1, n)
            if i >= n:
                return INCOMPLETE
            continue
        if c == 125:
            return i + 1
        w[L.ST_ERRPOS] = i
        return SYNTAX


@njit(nogil=True, cache=True, _nrt=False)
def _thread(thr, w, pidn, pids, tidn, tids):
    """Dense index of the (pid, tid) track; new tracks are appended to ``thr``."""
    hp = np.uint64(pidn) if pids < 0 else (np.uint64(pids) ^ _STR_TAG)
    ht = np.uint64(tidn) if tids < 0 else (np.uint64(tids) ^ _STR_TAG)
    hu = (hp * _MIX1) ^ (ht + _MIX2)
    hu = (hu ^ (hu >> np.uint64(31))) * _MIX3
    h = np.int64(hu)
    if h == 0:
        h = np.int64(1)
    mask = thr.shape[1] - 1
    slot = h & mask
    while True:
        k = thr[L.TR_KEY, slot]
        if k == h:
            return thr[L.TR_ID, slot]
        if k == 0:
            idx = w[L.W_NTHR]
            thr[L.TR_KEY, slot] = h
            thr[L.TR_ID, slot] = idx
            thr[L.TR_PIDN, idx] = pidn
            thr[L.TR_PIDS, idx] = pids
            thr[L.TR_TIDN, idx] = tidn
            thr[L.TR_TIDS, idx] = tids
            w[L.W_NTHR] = idx + 1
            return idx
        slot = (slot + 1) & mask


@njit(nogil=True, cache=True, _nrt=False)
def rehash_threads(old, new):
    """Insert every track in the hash slots of the thread table ``old`` into the empty,
    larger ``new`` (slot rows TR_KEY / TR_ID; 0 = empty)."""
    mask = new.shape[1] - 1
    for i in range(old.shape[1]):
        h = old[L.TR_KEY, i]
        if h == 0:
            continue
        slot = h & mask
        while new[L.TR_KEY, slot] != 0:
            slot = (slot + 1) & mask
        new[L.TR_KEY, slot] = h
        new[L.TR_ID, slot] = old[L.TR_ID, i]


@njit(nogil=True, cache=True, _nrt=False)
def _row(w, store):
    """Claim the next row of ``store``'s active block."""
    r = w[L.W_FILL + store]
    w[L.W_FILL + store] = r + 1
    return r


@njit(nogil=True, cache=True, _nrt=False)
def _commit(w, sinfo, thr, blocks, spans, start, end):
    """Write the parsed event (scratch slots of ``w``) to its store; count it."""
    w[L.S_EVENTS] += 1
    index = w[L.ST_EVENT_INDEX]
    w[L.ST_EVENT_INDEX] = index + 1
    cat = w[EV + V_CAT]
    if cat >= 0:
        sinfo[L.SI_COUNT, cat] += 1
    ph = w[EV + V_PH]
    if ph == 0:
        w[L.S_SKIP_NO_PH] += 1
        return
    if ph == 77:  # 'M'
        w[L.S_METADATA] += 1
        r = w[L.ST_NRAW]
        spans[L.SP_RAW0, r] = start
        spans[L.SP_RAW1, r] = end
        w[L.ST_NRAW] = r + 1
        return
    if ph == 105 or ph == 73:  # 'i' 'I'
        w[L.S_INSTANT] += 1
        if w[AR + L.A_TOTAL_ALLOC] >= 0 and w[EV + V_TSST] == GOOD:  # an allocator event
            store = L.MEMORY
            r = _row(w, store)
            blocks[store, L.M_TS, r] = w[EV + V_TS]
            blocks[store, L.M_THREAD, r] = _thread(thr, w, w[EV + V_PIDN], w[EV + V_PIDS],
                                                   w[EV + V_TIDN], w[EV + V_TIDS])
            blocks[store, L.M_BYTES, r] = w[AR + L.A_MEM_BYTES]
            blocks[store, L.M_ALLOC, r] = w[AR + L.A_TOTAL_ALLOC]
            blocks[store, L.M_RESERVED, r] = w[AR + L.A_TOTAL_RESERVED]
            blocks[store, L.M_ADDR, r] = w[AR + L.A_ADDR]
            blocks[store, L.M_DEVICE, r] = w[AR + L.A_DEVICE_ID]
            blocks[store, L.M_DEVTYPE, r] = w[AR + L.A_DEVICE_TYPE]
            blocks[store, L.M_INDEX, r] = index
        return
    if ph == 67:  # 'C'
        w[L.S_COUNTER] += 1
        return
    if ph == 115 or ph == 102 or ph == 116:  # 's' 'f' 't'
        w[L.S_FLOW] += 1
        if w[EV + V_IDST] != GOOD or w[EV + V_TSST] != GOOD:
            w[L.S_SKIP_BAD_FLOW] += 1
            return
        store = L.FLOW
        r = _row(w, store)
        blocks[store, L.F_PH, r] = ph
        blocks[store, L.F_CAT, r] = cat
        blocks[store, L.F_ID, r] = w[EV + V_ID]
        blocks[store, L.F_THREAD, r] = _thread(thr, w, w[EV + V_PIDN], w[EV + V_PIDS],
                                               w[EV + V_TIDN], w[EV + V_TIDS])
        blocks[store, L.F_TS, r] = w[EV + V_TS]
        blocks[store, L.F_BP, r] = w[EV + V_BP]
        blocks[store, L.F_NAME, r] = w[EV + V_NAME]
        return
    if ph != 88:  # not 'X'
        w[L.S_OTHER_PH] += 1
        return
    w[L.S_COMPLETE] += 1
    if w[EV + V_TSST] != GOOD:
        st = w[EV + V_TSST]
        w[L.S_SKIP_NO_TS if st == MISSING else L.S_SKIP_RANGE_TS if st == RANGE
          else L.S_SKIP_BAD_TS] += 1
        return
    if w[EV + V_DURST] != GOOD:
        st = w[EV + V_DURST]
        w[L.S_SKIP_NO_DUR if st == MISSING else L.S_SKIP_RANGE_DUR if st == RANGE
          else L.S_SKIP_BAD_DUR] += 1
        return
    if w[EV + V_DUR] > 0 and w[EV + V_TS] > INT64_MAX - w[EV + V_DUR]:
        w[L.S_SKIP_RANGE_END] += 1  # its end would wrap around: no time is right
        return
    if w[EV + V_DUR] < 0:
        w[L.S_NEG_DUR] += 1
    cls = sinfo[L.SI_CLASS, cat] if cat >= 0 else L.CLS_NONE
    if w[L.S_FIRST_SEEN] == 0 and cat >= 0 and cls != L.CLS_TRACE:
        w[L.S_FIRST_SEEN] = 1
        w[L.S_FIRST_TS] = w[EV + V_TS]
    thread = _thread(thr, w, w[EV + V_PIDN], w[EV + V_PIDS], w[EV + V_TIDN],
                                      w[EV + V_TIDS])
    if (cls == L.CLS_KERNEL or cls == L.CLS_MEMCPY or cls == L.CLS_MEMSET
            or cls == L.CLS_GPU_ANNOT or cls == L.CLS_SYNC):
        store = L.GPU
        r = _row(w, store)
        blocks[store, L.G_TS, r] = w[EV + V_TS]
        blocks[store, L.G_DUR, r] = w[EV + V_DUR]
        blocks[store, L.G_NAME, r] = w[EV + V_NAME]
        blocks[store, L.G_CAT, r] = cat
        blocks[store, L.G_THREAD, r] = thread
        blocks[store, L.G_DEVICE, r] = w[AR + L.A_DEVICE]
        blocks[store, L.G_STREAM, r] = w[AR + L.A_STREAM]
        blocks[store, L.G_CORR, r] = w[AR + L.A_CORR]
        blocks[store, L.G_EXT, r] = w[AR + L.A_EXT]
        blocks[store, L.G_BYTES, r] = w[AR + L.A_BYTES]
        blocks[store, L.G_BW, r] = w[AR + L.A_BW]
        blocks[store, L.G_INDEX, r] = index
    elif cls == L.CLS_RUNTIME or cls == L.CLS_DRIVER:
        store = L.LAUNCH
        r = _row(w, store)
        blocks[store, L.L_TS, r] = w[EV + V_TS]
        blocks[store, L.L_DUR, r] = w[EV + V_DUR]
        blocks[store, L.L_NAME, r] = w[EV + V_NAME]
        blocks[store, L.L_CAT, r] = cat
        blocks[store, L.L_THREAD, r] = thread
        blocks[store, L.L_CORR, r] = w[AR + L.A_CORR]
        blocks[store, L.L_EXT, r] = w[AR + L.A_EXT]
        blocks[store, L.L_INDEX, r] = index
    elif cls == L.CLS_PYTHON:
        store = L.PY
        r = _row(w, store)
        blocks[store, L.P_TS, r] = w[EV + V_TS]
        blocks[store, L.P_DUR, r] = w[EV + V_DUR]
        blocks[store, L.P_NAME, r] = w[EV + V_NAME]
        blocks[store, L.P_THREAD, r] = thread
        blocks[store, L.P_PYID, r] = w[AR + L.A_PYID]
        blocks[store, L.P_PARENT, r] = w[AR + L.A_PYPARENT]
        blocks[store, L.P_INDEX, r] = index
    else:
        store = L.OPS
        r = _row(w, store)
        blocks[store, L.O_TS, r] = w[EV + V_TS]
        blocks[store, L.O_DUR, r] = w[EV + V_DUR]
        blocks[store, L.O_NAME, r] = w[EV + V_NAME]
        blocks[store, L.O_CAT, r] = cat
        blocks[store, L.O_THREAD, r] = thread
        blocks[store, L.O_EXT, r] = w[AR + L.A_EXT]
        blocks[store, L.O_SEQNUM, r] = w[AR + L.A_SEQNUM]
        blocks[store, L.O_FWD, r] = w[AR + L.A_FWD]
        blocks[store, L.O_STREAM, r] = w[AR + L.A_STREAM]
        blocks[store, L.O_INDEX, r] = index
    if ((store == L.GPU and cls == L.CLS_SYNC and
         (w[AR + L.A_WAIT_STREAM] >= 0 or w[AR + L.A_WAIT_CORR] >= 0))
            or (store == L.OPS and (w[AR + L.A_DIMS] >= 0 or w[AR + L.A_TYPES] >= 0))):
        x = _row(w, L.XARGS)
        blocks[L.XARGS, L.X_STORE, x] = store
        blocks[L.XARGS, L.X_ROW, x] = w[L.W_BASE + store] + r
        blocks[L.XARGS, L.X_WAIT_STREAM, x] = w[AR + L.A_WAIT_STREAM]
        blocks[L.XARGS, L.X_WAIT_CORR, x] = w[AR + L.A_WAIT_CORR]
        blocks[L.XARGS, L.X_DIMS, x] = w[AR + L.A_DIMS]
        blocks[L.XARGS, L.X_TYPES, x] = w[AR + L.A_TYPES]
        blocks[L.XARGS, L.X_CONCRETE, x] = w[AR + L.A_CONCRETE]
    has_comm = (w[AR + L.A_COLL] >= 0 or w[AR + L.A_PGNAME] >= 0 or w[AR + L.A_IN] >= 0
                or w[AR + L.A_GSIZE] >= 0 or w[AR + L.A_PGRANKS] >= 0)
    if has_comm and (store == L.GPU or store == L.OPS):
        c = _row(w, L.COMM)
        blocks[L.COMM, L.C_STORE, c] = store
        blocks[L.COMM, L.C_ROW, c] = w[L.W_BASE + store] + r
        blocks[L.COMM, L.C_COLL, c] = w[AR + L.A_COLL]
        blocks[L.COMM, L.C_DTYPE, c] = w[AR + L.A_DTYPE]
        blocks[L.COMM, L.C_IN, c] = w[AR + L.A_IN]
        blocks[L.COMM, L.C_OUT, c] = w[AR + L.A_OUT]
        blocks[L.COMM, L.C_GSIZE, c] = w[AR + L.A_GSIZE]
        blocks[L.COMM, L.C_PGNAME, c] = w[AR + L.A_PGNAME]
        blocks[L.COMM, L.C_PGDESC, c] = w[AR + L.A_PGDESC]
        blocks[L.COMM, L.C_PGRANKS, c] = w[AR + L.A_PGRANKS]
        blocks[L.COMM, L.C_SEQ, c] = w[AR + L.A_SEQ]
        blocks[L.COMM, L.C_SRC, c] = w[AR + L.A_SRC]
        blocks[L.COMM, L.C_DST, c] = w[AR + L.A_DST]


@njit(nogil=True, cache=True, _nrt=False)
def _need_more(w, mode, pos):
    w[L.ST_MODE] = mode
    w[L.ST_POS] = pos
    return L.R_NEED_MORE


@njit(nogil=True, cache=True, _nrt=False)
def _fail(w, code, pos):
    w[L.ST_ERRCODE] = code
    w[L.ST_ERRPOS] = pos
    return L.R_ERROR


@njit(nogil=True, cache=True, _nrt=False)
def _any_full(w, rows):
    for s in range(L.N_STORES):
        if w[L.W_FILL + s] >= rows:
            return True
    return False


@njit(nogil=True, cache=True, _nrt=False)
def scan(buf, n, eof, w, strs, sinfo, pend, thr, blocks, spans):
    """Scan ``buf[:n]`` from ``w[ST_POS]``; returns an ``R_*`` status (see module doc).

    ``eof`` tells that no bytes follow ``buf[:n]``. On R_NEED_MORE ``w[ST_POS]`` is the
    first byte still needed; on R_ERROR ``w[ST_ERRPOS]`` is where the input went wrong.
    """
    rows = blocks.shape[2]
    i = w[L.ST_POS]
    mode = w[L.ST_MODE]
    while True:
        if mode == L.M_EVENTS_ITEM or mode == L.M_ARRAY_ITEM:
            i = skip_ws(buf, i, n)
            if i >= n:
                return _need_more(w, mode, i)
            c = buf[i]
            if c == 93:  # ']'
                i += 1
                mode = L.M_TOP_AFTER_VALUE if mode == L.M_EVENTS_ITEM else L.M_DONE
                continue
            w[L.ST_MODE] = mode
            w[L.ST_POS] = i
            if _any_full(w, rows):
                return L.R_FLUSH
            if w[L.W_NTHR] * 2 + 4 > thr.shape[1]:
                return L.R_GROW_THREADS
            if w[L.ST_NRAW] >= spans.shape[1]:
                return L.R_DRAIN
            if c == 123:
                e = _parse_event(buf, i, n, w, strs, sinfo, pend)
                if e == INCOMPLETE:
                    return _need_more(w, mode, i)
                if e == NEED_ROOM:
                    return L.R_GROW_STRINGS
                if e < 0:
                    return _fail(w, L.E_BAD_EVENT, w[L.ST_ERRPOS])
                _commit(w, sinfo, thr, blocks, spans, i, e)
            else:
                e = skip_value(buf, i, n)
                if e == INCOMPLETE:
                    return _need_more(w, mode, i)
                if e < 0:
                    return _fail(w, L.E_BAD_VALUE, i)
                w[L.S_EVENTS] += 1
                w[L.S_SKIP_NOT_OBJECT] += 1
                w[L.ST_EVENT_INDEX] += 1
            i = e
            mode = L.M_EVENTS_AFTER if mode == L.M_EVENTS_ITEM else L.M_ARRAY_AFTER
        elif mode == L.M_EVENTS_AFTER or mode == L.M_ARRAY_AFTER:
            i = skip_ws(buf, i, n)
            if i >= n:
                return _need_more(w, mode, i)
            c = buf[i]
            if c == 44:
                i += 1
                mode = L.M_EVENTS_ITEM if mode == L.M_EVENTS_AFTER else L.M_ARRAY_ITEM
            elif c == 93:
                i += 1
                mode = L.M_TOP_AFTER_VALUE if mode == L.M_EVENTS_AFTER else L.M_DONE
            else:
                return _fail(w, L.E_EXPECTED_COMMA, i)
        elif mode == L.M_TOP_KEY:
            i = skip_ws(buf, i, n)
            if i >= n:
                return _need_more(w, mode, i)
            c = buf[i]
            if c == 125:
                i += 1
                mode = L.M_DONE
                continue
            if c != 34:
                return _fail(w, L.E_EXPECTED_KEY, i)
            kstart = i
            j, h, _esc = scan_string(buf, i, n)
            if j < 0:
                return _need_more(w, mode, kstart)
            k = skip_ws(buf, j, n)
            if k >= n:
                return _need_more(w, mode, kstart)
            if buf[k] != 58:
                return _fail(w, L.E_EXPECTED_COLON, k)
            k = skip_ws(buf, k + 1, n)
            if k >= n:
                return _need_more(w, mode, kstart)
            if h == L.TRACE_EVENTS_HASH and j - kstart - 2 == 11:
                if w[L.ST_SAW_EVENTS]:
                    return _fail(w, L.E_TWO_EVENTS, kstart)
                if buf[k] != 91:
                    return _fail(w, L.E_EVENTS_NOT_ARRAY, k)
                w[L.ST_SAW_EVENTS] = 1
                i = k + 1
                mode = L.M_EVENTS_ITEM
            else:
                e = skip_value(buf, k, n)
                if e == INCOMPLETE:
                    return _need_more(w, mode, kstart)
                if e < 0:
                    return _fail(w, L.E_BAD_VALUE, k)
                t = w[L.ST_NTOP]
                if t >= spans.shape[1]:
                    w[L.ST_MODE] = mode
                    w[L.ST_POS] = kstart
                    return L.R_DRAIN
                spans[L.SP_KEY0, t] = kstart + 1
                spans[L.SP_KEY1, t] = j - 1
                spans[L.SP_VAL0, t] = k
                spans[L.SP_VAL1, t] = e
                w[L.ST_NTOP] = t + 1
                i = e
                mode = L.M_TOP_AFTER_VALUE
        elif mode == L.M_TOP_AFTER_VALUE:
            i = skip_ws(buf, i, n)
            if i >= n:
                return _need_more(w, mode, i)
            c = buf[i]
            if c == 44:
                i += 1
                mode = L.M_TOP_KEY
            elif c == 125:
                i += 1
                mode = L.M_DONE
            else:
                return _fail(w, L.E_EXPECTED_COMMA, i)
        elif mode == L.M_START:
            i = skip_ws(buf, i, n)
            if i >= n:
                return _need_more(w, mode, i)
            c = buf[i]
            if c == 123:
                mode = L.M_TOP_KEY
            elif c == 91:
                w[L.ST_SAW_EVENTS] = 1
                mode = L.M_ARRAY_ITEM
            else:
                return _fail(w, L.E_NOT_JSON, i)
            i += 1
        else:  # M_DONE: only whitespace may follow
            i = skip_ws(buf, i, n)
            if i < n:
                return _fail(w, L.E_TRAILING, i)
            w[L.ST_MODE] = mode
            w[L.ST_POS] = i
            return L.R_DONE if eof else L.R_NEED_MORE
