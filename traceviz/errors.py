"""Errors with a one-line message: where (file, byte offset or event) and what to do."""
from __future__ import annotations


def one_line(text: str) -> str:
    """``text`` with line breaks and other control characters escaped (a file name may
    hold any of them), so a message stays one line."""
    return "".join(c if c.isprintable() or c == " " else repr(c)[1:-1] for c in text)


class CacheNote(UserWarning):
    """A kept result that could not be used (recomputed) or a cache folder refused: the
    command line prints it as one ``note:`` line."""


class RanksLeftOut(CacheNote):
    """Ranks a job leaves out of every analysis (their table cannot be read): a notebook
    sees the warning, the command line one ``note:`` line (and names them at its end)."""


class TraceVizError(Exception):
    """Base class of errors the CLI reports as one line (exit code 1)."""


class TraceError(TraceVizError):
    """A trace file that cannot be read: unreadable, not JSON, not a Kineto trace;
    ``made_from``: what a split trace's part error was made from, to renumber it."""

    made_from: tuple | None = None

    def __init__(self, path: str, message: str, *, offset: int | None = None,
                 hint: str = "") -> None:
        self.path = path
        self.offset = offset
        self.message = message
        self.hint = hint
        super().__init__(self.line())

    def __reduce__(self):
        """Pickled whole (it comes back from a worker process as it was raised)."""
        return (_trace_error, (self.path, self.message, self.offset, self.hint,
                               self.made_from))

    def line(self) -> str:
        where = self.path if self.offset is None else f"{self.path}: byte {self.offset}"
        text = f"{where}: {self.message}"
        if self.hint:
            text += f"; {self.hint}"
        return text


def _trace_error(path: str, message: str, offset: int | None, hint: str,
                 made_from: tuple | None) -> TraceError:
    """A :class:`TraceError` rebuilt from what :meth:`TraceError.__reduce__` gave."""
    exc = TraceError(path, message, offset=offset, hint=hint)
    exc.made_from = made_from
    return exc


class UsageError(TraceVizError):
    """Arguments that do not fit together (exit code 2 in the CLI)."""

