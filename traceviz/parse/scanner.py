"""The numba state machine that turns Kineto trace bytes into column blocks.

:func:`scan` reads one buffer from ``st[ST_POS]`` and returns a status (``R_*`` in
:mod:`.layout`) whenever it needs the driver: more bytes (an event straddles the end of
the buffer), a full column block, a bigger string or thread table, metadata to decode,
the end of the trace, or an error. It is restartable: state lives in ``st`` and the
driver re-calls it after doing what the status asked. An event is committed to the
stores only when its closing brace has been read, so a restart never duplicates or
loses an event.

What it reads (everything else is skipped structurally, never decoded):

* the top level: an object (keys before and after ``traceEvents`` are recorded as byte
  spans for :mod:`.header`) or a bare array of events (torch_npu / Ascend);
* per event: ``ph name cat pid tid ts dur id bp args``; ``ts``/``dur`` as numbers or
  numeric strings, in microseconds, converted exactly to int64 ns;
* per ``args``: the keys in :data:`.layout.ARG_KEYS`.

Performance notes (numba specifics measured on this code): a helper loop that exits with
``break`` is not inlined by LLVM and costs ~10 ns per call, so hot helpers exit with
``return`` or a loop condition; wrapping arithmetic (hashes) is done in ``uint64``,
because LLVM treats signed overflow as undefined; the per-event functions that take many
arrays are inlined at numba level (``inline="always"``) to avoid passing them per call.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from . import layout as L
from .lexer import (INCOMPLETE, NUM_OK, SYNTAX, FNV_OFFSET, FNV_PRIME, number_token,
                    scan_string, skip_string, skip_value, skip_ws, string_number)
from .strings import intern

_STR_TAG = np.uint64(0x5BD1E9955BD1E995)
_MIX1 = np.uint64(0x9E3779B97F4A7C15)
_MIX2 = np.uint64(0xBF58476D1CE4E5B9)
_MIX3 = np.uint64(0x94D049BB133111EB)
NEED_ROOM = -3  # parse_event: the string table is too full to intern safely

# per-event scratch slots
(V_PH, V_NAME, V_CAT, V_TS, V_TSST, V_DUR, V_DURST, V_PIDN, V_PIDS, V_TIDN, V_TIDS, V_ID,
 V_IDST, V_BP, V_HASCOMM) = range(15)
N_V = 15
# number-field status
MISSING, GOOD, BAD = 0, 1, 2


@njit(nogil=True, cache=True, inline="always")
def _lookup(tab_keys, tab_vals, h):
    if h == 0:
        h = np.int64(1)
    mask = tab_keys.shape[0] - 1
    slot = h & mask
    while True:
        k = tab_keys[slot]
        if k == h:
            return tab_vals[slot]
        if k == 0:
            return np.int64(-1)
        slot = (slot + 1) & mask


@njit(nogil=True, cache=True)
def _hash_span(buf, start, end):
    h = FNV_OFFSET
    for i in range(start, end):
        h = (h ^ np.uint64(buf[i])) * FNV_PRIME
    return np.int64(h)


@njit(nogil=True, cache=True, inline="always")
def _room(skeys, smeta, spending):
    return smeta[0] * 2 + 4 <= skeys.shape[0] and smeta[1] + 1 <= spending.shape[1]


@njit(nogil=True, cache=True)
def _number_field(buf, k, n, scale):
    """A number field (JSON number or numeric string) at ``k``: ``(end, value, status)``."""
    c = buf[k]
    if c == 34:
        e = skip_string(buf, k, n)
        if e < 0:
            return e, np.int64(0), BAD
        v, st = string_number(buf, k + 1, e - 1, scale)
        return e, v, GOOD if st == NUM_OK else BAD
    if c == 123 or c == 91:
        return skip_value(buf, k, n), np.int64(0), BAD
    e, v, st = number_token(buf, k, n, scale)
    return e, v, GOOD if st == NUM_OK else BAD


@njit(nogil=True, cache=True, inline="always")
def _parse_args(buf, i, n, a, skeys, svals, smeta, spending, argk, argv, stats, st):
    """Parse the ``args`` object at ``i``; fills ``a``. Returns the end or a negative code."""
    i = skip_ws(buf, i + 1, n)
    if i >= n:
        return INCOMPLETE
    if buf[i] == 125:
        return i + 1
    while True:
        if buf[i] != 34:
            st[L.ST_ERRPOS] = i
            return SYNTAX
        j, h, _esc = scan_string(buf, i, n)
        if j < 0:
            return INCOMPLETE
        k = skip_ws(buf, j, n)
        if k >= n:
            return INCOMPLETE
        if buf[k] != 58:
            st[L.ST_ERRPOS] = k
            return SYNTAX
        k = skip_ws(buf, k + 1, n)
        if k >= n:
            return INCOMPLETE
        slot = _lookup(argk, argv, h)
        if slot < 0:
            e = skip_value(buf, k, n)
        elif slot < L.FIRST_STR_ARG:
            e, v, vst = _number_field(buf, k, n, 0)
            if e >= 0:
                if vst == GOOD:
                    a[slot] = v
                else:
                    stats[L.S_BAD_NUMBER] += 1
        else:
            c = buf[k]
            if c == 34:
                e, h2, _esc2 = scan_string(buf, k, n)
                if e >= 0:
                    if not _room(skeys, smeta, spending):
                        return NEED_ROOM
                    a[slot] = intern(skeys, svals, smeta, spending, h2, k + 1, e - k - 2)
            elif c == 91:  # a list given as JSON (e.g. Process Group Ranks): its text
                e = skip_value(buf, k, n)
                if e >= 0:
                    if not _room(skeys, smeta, spending):
                        return NEED_ROOM
                    a[slot] = intern(skeys, svals, smeta, spending, _hash_span(buf, k, e),
                                     k, e - k)
            else:
                e = skip_value(buf, k, n)
        if e < 0:
            if e == SYNTAX:
                st[L.ST_ERRPOS] = k
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
        st[L.ST_ERRPOS] = i
        return SYNTAX


@njit(nogil=True, cache=True, inline="always")
def _parse_event(buf, i, n, ev, a, skeys, svals, smeta, spending, evk, evv, argk, argv,
                 catclass, catk, catv, stats, st):
    """Parse the event object whose ``{`` is at ``i`` into ``ev`` / ``a``."""
    for q in range(N_V):
        ev[q] = -1
    ev[V_TSST] = MISSING
    ev[V_DURST] = MISSING
    ev[V_IDST] = MISSING
    ev[V_PH] = 0
    ev[V_BP] = 0
    ev[V_HASCOMM] = 0
    for q in range(a.shape[0]):
        a[q] = -1
    i = skip_ws(buf, i + 1, n)
    if i >= n:
        return INCOMPLETE
    if buf[i] == 125:
        return i + 1
    while True:
        if buf[i] != 34:
            st[L.ST_ERRPOS] = i
            return SYNTAX
        j, h, _esc = scan_string(buf, i, n)
        if j < 0:
            return INCOMPLETE
        k = skip_ws(buf, j, n)
        if k >= n:
            return INCOMPLETE
        if buf[k] != 58:
            st[L.ST_ERRPOS] = k
            return SYNTAX
        k = skip_ws(buf, k + 1, n)
        if k >= n:
            return INCOMPLETE
        key = _lookup(evk, evv, h)
        c = buf[k]
        if key == L.K_TS or key == L.K_DUR:
            e, v, vst = _number_field(buf, k, n, 3)
            if key == L.K_TS:
                ev[V_TS] = v
                ev[V_TSST] = vst
            else:
                ev[V_DUR] = v
                ev[V_DURST] = vst
        elif key == L.K_NAME or key == L.K_CAT:
            if c == 34:
                e, h2, _esc2 = scan_string(buf, k, n)
                if e >= 0:
                    if not _room(skeys, smeta, spending):
                        return NEED_ROOM
                    sid = intern(skeys, svals, smeta, spending, h2, k + 1, e - k - 2)
                    if key == L.K_NAME:
                        ev[V_NAME] = sid
                    else:
                        ev[V_CAT] = sid
                        if catclass[sid] < 0:
                            cls = _lookup(catk, catv, h2)
                            catclass[sid] = L.CLS_OTHER if cls < 0 else cls
            else:
                e = skip_value(buf, k, n)
        elif key == L.K_PH:
            if c == 34:
                e = skip_string(buf, k, n)
                if e >= 0 and e - k > 2:
                    ev[V_PH] = buf[k + 1]
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
                        if not _room(skeys, smeta, spending):
                            return NEED_ROOM
                        sid = intern(skeys, svals, smeta, spending, h2, k + 1, e - k - 2)
            else:
                e, v, vst = _number_field(buf, k, n, 0)
                if vst == GOOD:
                    num = v
            if key == L.K_PID:
                ev[V_PIDN] = num
                ev[V_PIDS] = sid
            else:
                ev[V_TIDN] = num
                ev[V_TIDS] = sid
        elif key == L.K_ID:
            if c == 34:  # a numeric string is its number, any other string its hash
                e, h2, _esc2 = scan_string(buf, k, n)
                if e >= 0:
                    v, vst = string_number(buf, k + 1, e - 1, 0)
                    ev[V_ID] = v if vst == NUM_OK else h2
                    ev[V_IDST] = GOOD
            else:
                e, v, vst = _number_field(buf, k, n, 0)
                ev[V_ID] = v
                ev[V_IDST] = vst
        elif key == L.K_BP:
            e = skip_value(buf, k, n)
            if c == 34 and e - k > 2:
                ev[V_BP] = buf[k + 1]
        elif key == L.K_ARGS and c == 123:
            e = _parse_args(buf, k, n, a, skeys, svals, smeta, spending, argk, argv, stats, st)
        else:
            e = skip_value(buf, k, n)
        if e < 0:
            if e == SYNTAX and st[L.ST_ERRPOS] < k:
                st[L.ST_ERRPOS] = k
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
        st[L.ST_ERRPOS] = i
        return SYNTAX


@njit(nogil=True, cache=True)
def _thread(tkeys, tvals, tmeta, tinfo, pidn, pids, tidn, tids):
    """Dense index of the (pid, tid) track; new tracks are appended to ``tinfo``."""
    hp = np.uint64(pidn) if pids < 0 else (np.uint64(pids) ^ _STR_TAG)
    ht = np.uint64(tidn) if tids < 0 else (np.uint64(tids) ^ _STR_TAG)
    hu = (hp * _MIX1) ^ (ht + _MIX2)
    hu = (hu ^ (hu >> np.uint64(31))) * _MIX3
    h = np.int64(hu)
    if h == 0:
        h = np.int64(1)
    mask = tkeys.shape[0] - 1
    slot = h & mask
    while True:
        k = tkeys[slot]
        if k == h:
            return tvals[slot]
        if k == 0:
            idx = tmeta[0]
            tkeys[slot] = h
            tvals[slot] = idx
            tinfo[0, idx] = pidn
            tinfo[1, idx] = pids
            tinfo[2, idx] = tidn
            tinfo[3, idx] = tids
            tmeta[0] = idx + 1
            return idx
        slot = (slot + 1) & mask


@njit(nogil=True, cache=True, inline="always")
def _commit(ev, a, start, end, st, stats, catcount, catclass, tkeys, tvals, tmeta, tinfo, fill, base, gpu, launch, ops, py, comm, flow, raw):
    """Write the parsed event to its store; count it."""
    stats[L.S_EVENTS] += 1
    index = st[L.ST_EVENT_INDEX]
    st[L.ST_EVENT_INDEX] = index + 1
    cat = ev[V_CAT]
    if cat >= 0:
        catcount[cat] += 1
    ph = ev[V_PH]
    if ph == 0:
        stats[L.S_SKIP_NO_PH] += 1
        return
    if ph == 77:  # 'M'
        stats[L.S_METADATA] += 1
        r = st[L.ST_NRAW]
        raw[0, r] = start
        raw[1, r] = end
        st[L.ST_NRAW] = r + 1
        return
    if ph == 105 or ph == 73:  # 'i' 'I'
        stats[L.S_INSTANT] += 1
        return
    if ph == 67:  # 'C'
        stats[L.S_COUNTER] += 1
        return
    if ph == 115 or ph == 102 or ph == 116:  # 's' 'f' 't'
        stats[L.S_FLOW] += 1
        if ev[V_IDST] != GOOD or ev[V_TSST] != GOOD:
            stats[L.S_SKIP_BAD_FLOW] += 1
            return
        thread = _thread(tkeys, tvals, tmeta, tinfo, ev[V_PIDN], ev[V_PIDS], ev[V_TIDN],
                         ev[V_TIDS])
        r = fill[L.FLOW]
        flow[L.F_PH, r] = ph
        flow[L.F_CAT, r] = cat
        flow[L.F_ID, r] = ev[V_ID]
        flow[L.F_THREAD, r] = thread
        flow[L.F_TS, r] = ev[V_TS]
        flow[L.F_BP, r] = ev[V_BP]
        fill[L.FLOW] = r + 1
        return
    if ph != 88:  # not 'X'
        stats[L.S_OTHER_PH] += 1
        return
    stats[L.S_COMPLETE] += 1
    if ev[V_TSST] != GOOD:
        stats[L.S_SKIP_NO_TS if ev[V_TSST] == MISSING else L.S_SKIP_BAD_TS] += 1
        return
    if ev[V_DURST] != GOOD:
        stats[L.S_SKIP_NO_DUR if ev[V_DURST] == MISSING else L.S_SKIP_BAD_DUR] += 1
        return
    if ev[V_DUR] < 0:
        stats[L.S_NEG_DUR] += 1
    cls = catclass[cat] if cat >= 0 else L.CLS_NONE
    thread = _thread(tkeys, tvals, tmeta, tinfo, ev[V_PIDN], ev[V_PIDS], ev[V_TIDN],
                     ev[V_TIDS])
    store = L.OPS
    if (cls == L.CLS_KERNEL or cls == L.CLS_MEMCPY or cls == L.CLS_MEMSET
            or cls == L.CLS_GPU_ANNOT or cls == L.CLS_SYNC):
        store = L.GPU
        r = fill[L.GPU]
        gpu[L.G_TS, r] = ev[V_TS]
        gpu[L.G_DUR, r] = ev[V_DUR]
        gpu[L.G_NAME, r] = ev[V_NAME]
        gpu[L.G_CAT, r] = cat
        gpu[L.G_THREAD, r] = thread
        gpu[L.G_DEVICE, r] = a[L.A_DEVICE]
        gpu[L.G_STREAM, r] = a[L.A_STREAM]
        gpu[L.G_CORR, r] = a[L.A_CORR]
        gpu[L.G_EXT, r] = a[L.A_EXT]
        gpu[L.G_BYTES, r] = a[L.A_BYTES]
        gpu[L.G_INDEX, r] = index
        fill[L.GPU] = r + 1
    elif cls == L.CLS_RUNTIME or cls == L.CLS_DRIVER:
        store = L.LAUNCH
        r = fill[L.LAUNCH]
        launch[L.L_TS, r] = ev[V_TS]
        launch[L.L_DUR, r] = ev[V_DUR]
        launch[L.L_NAME, r] = ev[V_NAME]
        launch[L.L_CAT, r] = cat
        launch[L.L_THREAD, r] = thread
        launch[L.L_CORR, r] = a[L.A_CORR]
        launch[L.L_EXT, r] = a[L.A_EXT]
        launch[L.L_INDEX, r] = index
        fill[L.LAUNCH] = r + 1
    elif cls == L.CLS_PYTHON:
        store = L.PY
        r = fill[L.PY]
        py[L.P_TS, r] = ev[V_TS]
        py[L.P_DUR, r] = ev[V_DUR]
        py[L.P_NAME, r] = ev[V_NAME]
        py[L.P_THREAD, r] = thread
        py[L.P_PYID, r] = a[L.A_PYID]
        py[L.P_PARENT, r] = a[L.A_PYPARENT]
        py[L.P_INDEX, r] = index
        fill[L.PY] = r + 1
    else:
        r = fill[L.OPS]
        ops[L.O_TS, r] = ev[V_TS]
        ops[L.O_DUR, r] = ev[V_DUR]
        ops[L.O_NAME, r] = ev[V_NAME]
        ops[L.O_CAT, r] = cat
        ops[L.O_THREAD, r] = thread
        ops[L.O_EXT, r] = a[L.A_EXT]
        ops[L.O_SEQNUM, r] = a[L.A_SEQNUM]
        ops[L.O_FWD, r] = a[L.A_FWD]
        ops[L.O_STREAM, r] = a[L.A_STREAM]
        ops[L.O_INDEX, r] = index
        fill[L.OPS] = r + 1
    if (a[L.A_COLL] >= 0 or a[L.A_PGNAME] >= 0 or a[L.A_IN] >= 0 or a[L.A_GSIZE] >= 0
            or a[L.A_PGRANKS] >= 0):
        if store == L.GPU or store == L.OPS:
            c = fill[L.COMM]
            comm[L.C_STORE, c] = store
            comm[L.C_ROW, c] = base[store] + fill[store] - 1
            comm[L.C_COLL, c] = a[L.A_COLL]
            comm[L.C_DTYPE, c] = a[L.A_DTYPE]
            comm[L.C_IN, c] = a[L.A_IN]
            comm[L.C_OUT, c] = a[L.A_OUT]
            comm[L.C_GSIZE, c] = a[L.A_GSIZE]
            comm[L.C_PGNAME, c] = a[L.A_PGNAME]
            comm[L.C_PGDESC, c] = a[L.A_PGDESC]
            comm[L.C_PGRANKS, c] = a[L.A_PGRANKS]
            comm[L.C_SEQ, c] = a[L.A_SEQ]
            comm[L.C_SRC, c] = a[L.A_SRC]
            comm[L.C_DST, c] = a[L.A_DST]
            fill[L.COMM] = c + 1


@njit(nogil=True, cache=True)
def _need_more(st, mode, pos):
    st[L.ST_MODE] = mode
    st[L.ST_POS] = pos
    return L.R_NEED_MORE


@njit(nogil=True, cache=True)
def _fail(st, code, pos):
    st[L.ST_ERRCODE] = code
    st[L.ST_ERRPOS] = pos
    return L.R_ERROR


@njit(nogil=True, cache=True)
def _full(fill, cap):
    for s in range(fill.shape[0]):
        if fill[s] >= cap[s]:
            return True
    return False


@njit(nogil=True, cache=True)
def scan(buf, n, eof, st, stats, catcount, catclass,
         skeys, svals, smeta, spending, tkeys, tvals, tmeta, tinfo,
         evk, evv, argk, argv, catk, catv,
         fill, base, cap, gpu, launch, ops, py, comm, flow, top, raw):
    """Scan ``buf[:n]`` from ``st[ST_POS]``; returns an ``R_*`` status (see module doc).

    ``eof`` tells that no bytes follow ``buf[:n]``. On R_NEED_MORE ``st[ST_POS]`` is the
    first byte still needed; on R_ERROR ``st[ST_ERRPOS]`` is where the input went wrong.
    ``top`` receives (key_start, key_end, value_start, value_end) of top-level keys other
    than ``traceEvents``; ``raw`` receives (start, end) of metadata (``ph: M``) events.
    """
    ev = np.empty(N_V, dtype=np.int64)
    a = np.empty(L.N_ARGS, dtype=np.int64)
    i = st[L.ST_POS]
    mode = st[L.ST_MODE]
    while True:
        if mode == L.M_EVENTS_ITEM or mode == L.M_ARRAY_ITEM:
            i = skip_ws(buf, i, n)
            if i >= n:
                return _need_more(st, mode, i)
            c = buf[i]
            if c == 93:  # ']'
                i += 1
                mode = L.M_TOP_AFTER_VALUE if mode == L.M_EVENTS_ITEM else L.M_DONE
                continue
            st[L.ST_MODE] = mode
            st[L.ST_POS] = i
            if _full(fill, cap):
                return L.R_FLUSH
            if tmeta[0] * 2 + 4 > tkeys.shape[0]:
                return L.R_GROW_THREADS
            if st[L.ST_NRAW] >= raw.shape[1]:
                return L.R_DRAIN
            if c == 123:
                e = _parse_event(buf, i, n, ev, a, skeys, svals, smeta, spending, evk, evv,
                                 argk, argv, catclass, catk, catv, stats, st)
                if e == INCOMPLETE:
                    return _need_more(st, mode, i)
                if e == NEED_ROOM:
                    return L.R_GROW_STRINGS
                if e < 0:
                    return _fail(st, L.E_BAD_EVENT, st[L.ST_ERRPOS])
                _commit(ev, a, i, e, st, stats, catcount, catclass, tkeys, tvals, tmeta, tinfo,
                        fill, base, gpu, launch, ops, py, comm, flow, raw)
            else:
                e = skip_value(buf, i, n)
                if e == INCOMPLETE:
                    return _need_more(st, mode, i)
                if e < 0:
                    return _fail(st, L.E_BAD_VALUE, i)
                stats[L.S_EVENTS] += 1
                stats[L.S_SKIP_NOT_OBJECT] += 1
                st[L.ST_EVENT_INDEX] += 1
            i = e
            mode = L.M_EVENTS_AFTER if mode == L.M_EVENTS_ITEM else L.M_ARRAY_AFTER
        elif mode == L.M_EVENTS_AFTER or mode == L.M_ARRAY_AFTER:
            i = skip_ws(buf, i, n)
            if i >= n:
                return _need_more(st, mode, i)
            c = buf[i]
            if c == 44:
                i += 1
                mode = L.M_EVENTS_ITEM if mode == L.M_EVENTS_AFTER else L.M_ARRAY_ITEM
            elif c == 93:
                i += 1
                mode = L.M_TOP_AFTER_VALUE if mode == L.M_EVENTS_AFTER else L.M_DONE
            else:
                return _fail(st, L.E_EXPECTED_COMMA, i)
        elif mode == L.M_TOP_KEY:
            i = skip_ws(buf, i, n)
            if i >= n:
                return _need_more(st, mode, i)
            c = buf[i]
            if c == 125:
                i += 1
                mode = L.M_DONE
                continue
            if c != 34:
                return _fail(st, L.E_EXPECTED_KEY, i)
            kstart = i
            j, h, _esc = scan_string(buf, i, n)
            if j < 0:
                return _need_more(st, mode, kstart)
            k = skip_ws(buf, j, n)
            if k >= n:
                return _need_more(st, mode, kstart)
            if buf[k] != 58:
                return _fail(st, L.E_EXPECTED_COLON, k)
            k = skip_ws(buf, k + 1, n)
            if k >= n:
                return _need_more(st, mode, kstart)
            if h == L.TRACE_EVENTS_HASH and j - kstart - 2 == 11:
                if buf[k] != 91:
                    return _fail(st, L.E_EVENTS_NOT_ARRAY, k)
                st[L.ST_SAW_EVENTS] = 1
                i = k + 1
                mode = L.M_EVENTS_ITEM
            else:
                e = skip_value(buf, k, n)
                if e == INCOMPLETE:
                    return _need_more(st, mode, kstart)
                if e < 0:
                    return _fail(st, L.E_BAD_VALUE, k)
                t = st[L.ST_NTOP]
                if t >= top.shape[1]:
                    st[L.ST_MODE] = mode
                    st[L.ST_POS] = kstart
                    return L.R_DRAIN
                top[0, t] = kstart + 1
                top[1, t] = j - 1
                top[2, t] = k
                top[3, t] = e
                st[L.ST_NTOP] = t + 1
                i = e
                mode = L.M_TOP_AFTER_VALUE
        elif mode == L.M_TOP_AFTER_VALUE:
            i = skip_ws(buf, i, n)
            if i >= n:
                return _need_more(st, mode, i)
            c = buf[i]
            if c == 44:
                i += 1
                mode = L.M_TOP_KEY
            elif c == 125:
                i += 1
                mode = L.M_DONE
            else:
                return _fail(st, L.E_EXPECTED_COMMA, i)
        elif mode == L.M_START:
            i = skip_ws(buf, i, n)
            if i >= n:
                return _need_more(st, mode, i)
            c = buf[i]
            if c == 123:
                mode = L.M_TOP_KEY
            elif c == 91:
                st[L.ST_SAW_EVENTS] = 1
                mode = L.M_ARRAY_ITEM
            else:
                return _fail(st, L.E_NOT_JSON, i)
            i += 1
        else:  # M_DONE: only whitespace may follow
            i = skip_ws(buf, i, n)
            if i < n:
                return _fail(st, L.E_TRAILING, i)
            st[L.ST_MODE] = mode
            st[L.ST_POS] = i
            return L.R_DONE if eof else L.R_NEED_MORE
