"""What every command of the command line shares: its input type (a path, or ``-`` for
stdin), the group that turns errors into one line and an exit status, the one way a
command ends (:func:`finish`), option parsers and the options several commands take."""
from __future__ import annotations

import os
import sys
from collections.abc import Callable

import click

from ..errors import TraceVizError, UsageError, one_line
from ..table.inputs import guarding_inputs, note_output
from ..table.scratch import remove_stdin_copies


def fail(message: str, code: int = 1) -> None:
    click.echo(f"traceviz: error: {one_line(message)}", err=True)
    sys.exit(code)


def echo_all(lines: list[str], err: bool = False) -> None:
    """Each line as one line: control characters a trace's names may hold escaped."""
    for line in lines:
        click.echo(one_line(line), err=err)


def write(result, outdir) -> list:
    from ..table.result import write as write_result

    return write_result(result, outdir)


def finish(result, outdir=".", wrote: str | Callable[[], str] | None = None,
           lines: list[str] | None = None) -> None:
    """How every command ends: ``result`` written under ``outdir``; its lines (or
    ``lines``) on stdout; its notes, one ``note:`` line each, and what was written
    (``wrote``, or what it gives once written; else the files' names) on stderr; then
    the ranks it leaves out named, exit 1 (:func:`left_out`)."""
    written = write(result, outdir)
    echo_all(result.lines if lines is None else lines)
    echo_all([f"note: {n}" for n in result.notes], err=True)
    if wrote is not None:
        click.echo(f"wrote {wrote() if callable(wrote) else wrote}", err=True)
    elif written:
        names = sorted({os.path.basename(os.fspath(w)) for w in written})
        shown = ", ".join(names[:6]) + (f" and {len(names) - 6} more" if len(names) > 6
                                        else "")
        click.echo(f"wrote {shown} to {outdir}", err=True)
    left_out(result.failed)


def left_out(failed: list[str]) -> None:
    """Name the ranks the outputs leave out and exit 1 (the outputs of the others are
    written): a job with a rank missing is not a success."""
    if failed:
        echo_all([f"failed: {one_line(why)}" for why in failed], err=True)
        fail(f"{len(failed)} rank(s) left out (listed above); the outputs cover the others")


def output_option(*decls: str, **attrs) -> Callable:
    """A command's ``-o`` option: an existing file it names is one the command will write,
    so naming it as an input too is refused at once (:func:`note_output`), not after
    the work when the output is written."""
    return click.option(*decls, callback=_guard_output, **attrs)


def _guard_output(ctx: click.Context, param: click.Parameter, value):
    if value and value != "-":
        note_output(value)
    return value


class Input(click.Path):
    """A trace (or a job's folder, or tables) by path; ``-``: the trace on stdin, copied
    into a temporary file the command reads and removes when it ends."""

    def convert(self, value, param, ctx):
        if value == "-":
            from ..table.scratch import stdin_copy

            # the binary stdin (click.get_binary_stream is deprecated: Click 9 drops it)
            return os.fspath(stdin_copy(sys.stdin.buffer))
        return super().convert(value, param, ctx)


class Group(click.Group):
    """Turns TraceVizError into one line on stderr instead of a traceback."""

    def invoke(self, ctx: click.Context):
        try:
            with guarding_inputs():  # an output named like an input is refused
                return super().invoke(ctx)
        except UsageError as exc:
            fail(str(exc), 2)
        except TraceVizError as exc:
            fail(str(exc), 1)
        except KeyboardInterrupt:
            fail("interrupted", 130)
        except BrokenPipeError:  # stdout closed early (| head): the reader has what it wants
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            raise SystemExit(0) from None
        except MemoryError:
            fail("out of memory; lower --memory-budget or use a machine with more RAM")
        except OSError as exc:  # a disk full, a permission: what and where, one line
            if os.environ.get("TRACEVIZ_DEBUG"):
                raise
            where = f"{exc.filename}: " if exc.filename else ""
            fail(f"{where}{exc.strerror or exc}")
        except (click.ClickException, click.exceptions.Exit, click.exceptions.Abort):
            raise
        except Exception as exc:  # a bug: one line, the traceback on request
            if os.environ.get("TRACEVIZ_DEBUG"):
                raise
            fail(f"internal error: {type(exc).__name__}: {exc} (set TRACEVIZ_DEBUG=1 for "
                  "the traceback and please report it)")
        finally:
            remove_stdin_copies()



def notes_as_lines() -> None:
    """Warnings traceviz issues for the user (a kept result recomputed, a cache folder
    refused) printed as one ``note:`` line each on stderr; others as Python prints them."""
    import warnings

    from ..errors import CacheNote

    shown = warnings.showwarning
    if getattr(shown, "traceviz_notes", False):  # installed by an earlier invocation
        return

    def show(message, category, filename, lineno, file=None, line=None):
        if issubclass(category, CacheNote):
            click.echo(f"note: {one_line(str(message))}", err=True)
        else:
            shown(message, category, filename, lineno, file, line)

    show.traceviz_notes = True  # type: ignore[attr-defined]
    warnings.showwarning = show



class LazyOptions(click.Command):
    """A command whose options are made the first time they are needed (its call, its
    ``--help``), not when the command line is imported: ``make_params`` may import what
    the other commands never load."""

    def __init__(self, *args, make_params, **kwargs):
        super().__init__(*args, **kwargs)
        self._make_params = make_params

    def get_params(self, ctx: click.Context) -> list[click.Parameter]:
        if self._make_params is not None:
            self.params.extend(self._make_params())
            self._make_params = None
        return super().get_params(ctx)


def synth_options() -> list[click.Option]:
    """One option per SynthConfig knob (the dataclass is the single source of truth);
    made on first use, so no other command imports the synthesizer."""
    from ..synth import SynthConfig
    from ..synth.config import LAYOUTS, SCHEDULES

    return _dataclass_options(SynthConfig, {"schedule": SCHEDULES, "layout": LAYOUTS})


def timeline_options() -> list[click.Option]:
    """One option per TimelineConfig knob (a synthesized op timeline)."""
    from ..synth.op_timeline import TimelineConfig

    return _dataclass_options(TimelineConfig, {})


def _dataclass_options(config, choices: dict[str, tuple[str, ...]]) -> list[click.Option]:
    """An option per field of the dataclass ``config`` (``choices``: the fields whose
    values are one of a few)."""
    import dataclasses

    options = []
    for f in dataclasses.fields(config):
        if f.name == "extra":
            continue
        flag = "--" + f.name.replace("_", "-")
        if f.type in ("bool", bool):
            options.append(click.Option([f"{flag}/--no-{f.name.replace('_', '-')}", f.name],
                                        default=f.default, show_default=True))
        elif f.name in choices:
            options.append(click.Option([flag, f.name], default=f.default, show_default=True,
                                        type=click.Choice(choices[f.name])))
        else:
            kind = (float if isinstance(f.default, float) else
                    str if isinstance(f.default, str) else int)
            options.append(click.Option([flag, f.name], type=kind, default=f.default,
                                        show_default=f.default is not None))
    return options


def link_rates(text: str | None) -> tuple[float, float] | None:
    """``--link-gbps INTRA,INTER``: two positive rates (GB/s)."""
    if not text:
        return None
    try:
        rates = tuple(float(x) for x in text.split(","))
    except ValueError:
        rates = ()
    if len(rates) != 2 or not all(r > 0 for r in rates):
        raise UsageError(f"--link-gbps {text!r}: expected two positive rates in GB/s, "
                         "within a node and across nodes, e.g. 450,50")
    return rates[0], rates[1]


def int_list(text: str | None) -> tuple[int, ...] | None:
    if not text:
        return None
    try:
        return tuple(int(x) for x in text.split(","))
    except ValueError:
        raise UsageError(f"{text!r}: expected comma-separated integers") from None



def run_options(func):
    """The run facts traces do not state (report, html), and --topology."""
    for option in reversed((
            click.option("--global-batch-size", type=click.IntRange(min=1),
                         help="Sequences per iteration over all replicas."),
            click.option("--seq-len", type=click.IntRange(min=1),
                         help="Tokens per sequence."),
            click.option("--flops-per-token", type=float,
                         help="Training FLOPs per token (forward + backward)."),
            click.option("--params", type=float,
                         help="Model parameters, in billions: FLOPs per token = 6 x params."),
            click.option("--model", help="Model name, for the header and the file name."),
            click.option("--peak-tflops", type=float,
                         help="Peak TFLOP/s per GPU for MFU [default: from the device name]."),
            click.option("--peak-bw", "peak_bw_gbps", type=float,
                         help="Peak bus bandwidth (GB/s) for utilization."),
            click.option("--topology", type=click.Path(dir_okay=False),
                         help="unique_parallel_groups_*.txt [default: found next to the "
                              "traces]."))):
        func = option(func)
    return func




def start() -> None:
    """What every command does first: on a terminal, the first compile said (those that
    read traces); numba's optional probes answered, freed memory
    handed back, traceviz's warnings as notes, SIGTERM handled (temporary files go, exit
    143), and what SIGKILLed runs left removed."""
    from ..parse.budget import hand_back_freed_memory
    from ..startup import say_first_compile, skip_numba_optional_probes
    from ..table.scratch import exit_on_sigterm, remove_dead_spills

    if click.get_current_context().invoked_subcommand not in ("topology", "synth", "hang"):
        say_first_compile(lambda line: click.echo(line, err=True))
    skip_numba_optional_probes()
    hand_back_freed_memory()
    notes_as_lines()
    exit_on_sigterm()
    remove_dead_spills()


def workers_options(func):
    """Where the per-rank work runs (parsing traces still to parse, each rank's share of
    the diagnosis): -j / --jobs local processes, or --scheduler (a Dask cluster)."""
    for option in reversed((
            click.option("-j", "--jobs", type=click.IntRange(min=0), default=0,
                         help="Worker processes reading the ranks' tables [default: one "
                              "per usable core; jobs under 32 ranks run in this process] and "
                              "parsing traces still to parse [default: 2; never more than the "
                              "traces, one trace of up to 16 MiB in this process]."),
            click.option("--scheduler", help="Do the per-rank work on a Dask cluster: "
                         "tcp://HOST:PORT, or 'local' (README, On a cluster)."))):
        func = option(func)
    return func


# the job's layout file, as every command that reads a job takes it
topology_option = click.option(
    "--topology", "topology_file", type=click.Path(dir_okay=False),
    help="unique_parallel_groups_*.txt of the job [default: found beside the traces, "
         "else from their pg_config, else from their sends / receives].")
