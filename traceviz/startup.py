"""What the ``traceviz`` command does at start so a short command starts fast.

A command on a small trace runs numba's functions as plain Python. Loading them compiled
from numba's cache costs ~0.2 s before the first one runs (numba imports its
implementation registries and links each function's object code), while the Python of
the whole parse of a trace with at most :data:`SMALL_TRACE` bytes of text takes less
(~0.7 MB/s: ~0.09 s at the limit; ``benchmarks/startup_bench.py``). The functions are
the same code either way: a test parses every small trace both ways and compares the
tables.

numba probes for optional libraries traceviz never needs. Importing numba imports SciPy
to check its version (~8 ms) and PyYAML to read a ``.numba_config.yaml`` in the working
directory (~11 ms; only when there is none is it skipped); numba's first compile or cache
load imports ``scipy.linalg`` from ``numba.np.arraymath`` for a BLAS (~150 ms of every
command on a machine where SciPy is installed, most ML environments; no jitted function
here calls ``np.dot`` or ``np.linalg``), and ``cffi`` from
``numba.core.typing.cffi_utils`` to build an FFI (~15-30 ms where cffi is installed,
which most environments are: nothing here calls a CFFI function). In the command's own
process these probes are answered "not installed", as numba answers them on a machine
without the library. Library users (a notebook) keep numba's normal behaviour: this runs
only from the CLI.

The command's start-up (importing numpy, pyarrow, numba and traceviz, numba's first
loads) makes long-lived objects only, which Python's cyclic collector walks again and
again at its default threshold (700 allocations): ~37 ms of collections on a 0.5 GB
parse, all before its scan. The command pauses it (:func:`pause_collector`: a threshold
of a million) until its first trace is scanned, or a second at most; then the start-up's
objects are frozen and the collector runs as before (:func:`resume_collector`).
"""
from __future__ import annotations

import atexit
import gc
import importlib.abc
import os
import sys
import threading
from collections.abc import Iterable
from pathlib import Path

NUMBA_CONFIG_FILE = ".numba_config.yaml"  # numba reads it from the working directory


def _always() -> bool:
    return True


def _no_numba_config() -> bool:
    return not os.path.isfile(NUMBA_CONFIG_FILE)


# module running a probe -> (the name it sets once its probe is over, what it imports,
# whether to answer "not installed" now)
_PROBES = {"numba": ("__version__", ("scipy",), _always),
           "numba.core.config": ("_HAVE_YAML", ("yaml",), _no_numba_config),
           "numba.np.arraymath": ("_HAVE_BLAS", ("scipy", "scipy.linalg",
                                                 "scipy.linalg.cython_blas"), _always),
           "numba.core.typing.cffi_utils": ("ffi", ("cffi",), _always)}
SMALL_TRACE = 64 << 10  # bytes of JSON text, all of a command's traces together
_command_line = False
START_THRESHOLD = 1_000_000  # allocations between collections while the command starts
START_SECONDS = 1.0  # the longest the collector waits
_paused: tuple[int, ...] | None = None  # the thresholds the collector resumes with
_resume_lock = threading.Lock()


class _NoOptionalProbes(importlib.abc.MetaPathFinder):
    """Fails the imports of :data:`_PROBES` while (and only while) the module probing
    for them runs its module-level probe: it is being executed and has not yet set the
    name that ends its probe (and the probe's condition holds). Any other import of
    those libraries goes through untouched."""

    def find_spec(self, name, path, target=None):
        for module, (set_after, names, skip) in _PROBES.items():
            if name in names:
                probing = sys.modules.get(module)
                if probing is not None and not hasattr(probing, set_after) and skip():
                    raise ImportError(f"{name}: not imported by traceviz's command line")
        return None


def skip_numba_optional_probes() -> None:
    """Install the finder (once) ahead of the others."""
    if not any(isinstance(f, _NoOptionalProbes) for f in sys.meta_path):
        sys.meta_path.insert(0, _NoOptionalProbes())


def pause_collector() -> None:
    """Let the cyclic collector wait for :data:`START_THRESHOLD` allocations while the
    command starts, for :data:`START_SECONDS` at most (the command's entry point calls
    this first)."""
    global _paused
    with _resume_lock:
        if _paused is not None:
            return
        _paused = gc.get_threshold()
        gc.set_threshold(START_THRESHOLD, *_paused[1:])
    # what lives until exit need not be walked at exit either (0.5 GB parse: ~70 ms)
    atexit.register(gc.freeze)
    timer = threading.Timer(START_SECONDS, resume_collector)
    timer.daemon = True
    timer.start()


def resume_collector() -> None:
    """The start-up is over: freeze its objects (no collection walks them again) and let
    the collector run at its thresholds from before :func:`pause_collector`. A no-op where
    the collector is not paused (a library user's process, a second call)."""
    global _paused
    with _resume_lock:
        if _paused is None:
            return
        gc.freeze()
        gc.set_threshold(*_paused)
        _paused = None


def from_command_line() -> None:
    """Mark this process as the ``traceviz`` command (its entry point calls this; a
    library user or a test invoking the Click group in its own process keeps compiled
    functions)."""
    global _command_line
    _command_line = True


def interpret_small_traces(paths: Iterable[str | os.PathLike]) -> bool:
    """Run numba's functions as Python in this process when ``paths`` are trace files
    with at most :data:`SMALL_TRACE` bytes of JSON text together; True when it did.

    Only in the command's own process and before numba is imported (the functions are
    compiled or not as their modules are imported); never for a folder, a parquet table
    or stdin (their size says nothing of the work: a 64 KB table holds ~10^5 rows)."""
    paths = list(paths)
    if not paths or not _command_line or "numba" in sys.modules:
        return False
    from .parse.source import text_size

    left = SMALL_TRACE
    for path in paths:
        size = text_size(path, left)
        if size is None:
            return False
        left -= size
    import warnings

    from numba.core import config

    config.DISABLE_JIT = True
    # the hashes multiply uint64 words modulo 2**64 on purpose: compiled, silently; as
    # Python, numpy warns of each wrap
    warnings.filterwarnings("ignore", "overflow encountered", RuntimeWarning)
    return True


def parser_compiled() -> bool:
    """Whether numba's cache holds the trace parser's compiled kernels, wherever numba
    keeps them (``NUMBA_CACHE_DIR``, beside the package, or the user-wide cache): by
    file name, without importing numba."""
    kernel = "scanner.scan-*.nbi"  # the parser's entry kernel, compiled with the rest
    if os.environ.get("NUMBA_CACHE_DIR"):
        places = [Path(os.environ["NUMBA_CACHE_DIR"]) / "parse_*"]
    else:
        user = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "numba"
        places = [Path(__file__).parent / "parse" / "__pycache__", user / "parse_*"]
    return any(any(Path(p.parent).glob(f"{p.name}/{kernel}")) for p in places)


def say_first_compile(echo) -> None:
    """On a terminal, where the parser has not been compiled yet: say that numba
    compiles traceviz's kernels now, once (the first command's silent half minute)."""
    if sys.stderr.isatty() and not parser_compiled():
        echo("traceviz: first run here: numba compiles traceviz's kernels for this machine "
             "(about half a minute on 2 cores, once; later runs load them)")
