"""The ``traceviz`` command line: one thin Click function per subcommand, declaring its
options and ending through :func:`.support.finish` (exit statuses: README, "Parse")."""
from __future__ import annotations

import sys
import time

import click

from .._version import __version__
from ..errors import TraceVizError, UsageError, one_line
from ..ingest.outputs import command_output
from ..startup import interpret_small_traces
from .support import (
    Group,
    Input,
    LazyOptions,
    echo_all,
    finish,
    int_list,
    link_rates,
    output_option,
    run_options,
    start,
    synth_options,
    timeline_options,
    topology_option,
    workers_options,
    write,
)


@click.group(cls=Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="traceviz")
def main() -> None:
    """Analyse PyTorch-profiler (Kineto) traces of distributed LLM training.

    \b
    Example:
      traceviz parse rank0.pt.trace.json.gz -o rank0.parquet
    """
    start()


def run() -> None:
    """The ``traceviz`` command: its console script and ``python -m traceviz``."""
    from ..startup import from_command_line, pause_collector

    pause_collector()  # until the first trace is scanned (startup)
    from_command_line()
    main()


@main.command()
@click.argument("trace")
@output_option("-o", "--output", help="Output parquet file, '-' for stdout "
              "[default: traceviz-out/<name>/<name>.parquet, <name> TRACE's name without .json].")
@click.option("--cpu", is_flag=True, help="Also write the CPU-side table to OUTPUT's "
              "name with .cpu.parquet.")
@click.option("--patterns", type=click.Path(dir_okay=False),
              help="TOML file overriding the shipped name patterns.")
@click.option("--strict", is_flag=True, help="Treat a truncated trace as an error (exit 1).")
@click.option("--memory-budget", type=click.IntRange(min=16), default=512, show_default=True,
              help="Memory budget of the parse in MB (the whole process); past its "
              "shares, column buffers and joins spill to disk.")
@topology_option
@click.option("--vpp", type=click.IntRange(min=1),
              help="Model chunks per pipeline stage (interleaved schedule) [default: found "
                   "from the trace].")
@click.option("-q", "--quiet", is_flag=True, help="Print nothing but errors.")
def parse(trace: str, output: str | None, cpu: bool, patterns: str | None, strict: bool,
          memory_budget: int, topology_file: str | None, vpp: int, quiet: bool) -> None:
    """Parse one rank's trace into the GPU activity table (parquet).

    TRACE is a .json, .json.gz or .json.zst file, or '-' for stdin.

    \b
    Examples:
      traceviz parse rank0.pt.trace.json -o rank0.parquet
      traceviz parse rank0.json.gz --cpu -o out/rank0.parquet
      cat trace.json.gz | traceviz parse - -o - > rank0.parquet
    """
    interpret_small_traces([trace])
    from ..commands import parse as command

    if output is None:
        output = "-" if trace == "-" and not sys.stdout.isatty() else command.default_output(
            "stdin" if trace == "-" else trace)
    command.check_output(output)
    start = time.perf_counter()
    chosen = click.get_current_context().get_parameter_source("memory_budget")
    result = command.run(trace, output, cpu=cpu, patterns=patterns,
                         memory_budget=memory_budget << 20, topology_file=topology_file,
                         vpp=vpp, warn_floor=chosen == click.core.ParameterSource.COMMANDLINE,
                         strict=strict)
    for warning in result.notes:
        click.echo(f"traceviz: warning: {one_line(warning)}", err=True)
    written = command.write_stdout(result) if output == "-" else write(result, ".")
    if not quiet:
        echo_all(command.summary_lines(result, time.perf_counter() - start, written), err=True)


@main.command()
@click.option("--world", type=click.IntRange(min=1), help="World size (number of ranks).")
@click.option("--tp", type=click.IntRange(min=1), default=1, show_default=True)
@click.option("--pp", type=click.IntRange(min=1), default=1, show_default=True)
@click.option("--cp", type=click.IntRange(min=1), default=1, show_default=True)
@click.option("--ep", type=click.IntRange(min=1), default=1, show_default=True)
@click.option("--expert-tp", type=click.IntRange(min=1), help="Expert TP size [default: --tp].")
@click.option("--order", default="tp-cp-ep-dp-pp", show_default=True,
              type=click.Choice(["tp-cp-ep-dp-pp", "tp-cp-ep-pp-dp"]))
@click.option("--global-batch-size", "gbs", default="N/A", help="Written into the file.")
@click.option("--from-traces", "from_traces", type=click.Path(exists=True),
              help="Derive the layout from the pg_config of the traces under this folder.")
@click.option("--from-file", "from_file", type=click.Path(exists=True, dir_okay=False),
              help="Read a unique_parallel_groups_*.txt file (e.g. to convert it to JSON).")
@output_option("-o", "--output", help="Write here (a folder gets unique_parallel_groups_"
              "<timestamp>.txt) instead of stdout.")
@click.option("--json", "as_json", is_flag=True, help="JSON (every group by group_desc, "
              "per-rank coordinates) instead of the Megatron-TraceViz text file.")
def topology(world, tp, pp, cp, ep, expert_tp, order, gbs, from_traces, from_file, output,
             as_json) -> None:
    """Megatron parallel groups: TP, CP, DP, PP, EP, expert TP/DP, model replicas.

    Writes the unique_parallel_groups_<timestamp>.txt file of the Megatron-TraceViz
    patch (or --json), from the sizes or from the traces' distributedInfo.pg_config.

    \b
    Examples:
      traceviz topology --world 32 --tp 4 --pp 4 -o tensorboard_dir/
      traceviz topology --from-traces tensorboard_dir/iteration_13 --json
      traceviz topology --from-file tensorboard_dir/unique_parallel_groups_*.txt --json
    """
    from ..commands import topology as command

    result = command.run(world=world, tp=tp, pp=pp, cp=cp, ep=ep, expert_tp=expert_tp,
                         order=order, traces=from_traces, file=from_file, as_json=as_json,
                         global_batch_size=gbs, output=output)
    finish(result)


@main.command(name="synth-timeline", cls=LazyOptions, make_params=timeline_options)
@click.argument("output", type=click.Path(dir_okay=False))
def synth_timeline(output: str, **knobs) -> None:
    """Write a synthetic op timeline (per-op timers of every rank and step, Megatron's
    1F1B names) as OUTPUT (.parquet, .csv or .jsonl), with the causes a large job slows
    by: the spread between GPUs and ops, uneven sequence lengths (--seq-cv), a slow rank
    from a step on (--slow-rank, --slow-from, --slow-steps), a heavier last stage
    (--last-stage-extra), a slow DP group (--slow-dp-factor, --slow-dp-stage), data
    loading spikes (--data-spike-ms). Then: traceviz diagnose OUTPUT.

    \b
    Examples:
      traceviz synth-timeline timers.parquet --pp 4 --dp 8 --steps 20 --slow-rank 29 --slow-from 8
      traceviz synth-timeline timers.csv --pp 2 --dp 4 --seq-cv 0.2
    """
    from ..synth.op_timeline import TimelineConfig, write_timeline

    cfg = TimelineConfig(**knobs)
    _, steps = write_timeline(cfg, output)
    click.echo(f"wrote {cfg.world} ranks x {cfg.steps} steps of timers to {output} "
               f"(median step {sorted(steps)[len(steps) // 2] / 1e6:.1f} ms)", err=True)


@main.command(cls=LazyOptions, make_params=synth_options)
@click.argument("outdir", type=click.Path(file_okay=False))
def synth(outdir: str, **knobs) -> None:
    """Write a synthetic Megatron-like job: per-rank Kineto traces, the topology file and
    ground_truth/ (kernels.parquet: the true phase, micro-batch and group of every
    kernel; ground_truth.json: per-rank micro-batch metrics, group totals, skew).

    \b
    Examples:
      traceviz synth job/ --tp 2 --pp 4 --dp 2 --microbatches 8
      traceviz synth job/ --pp 4 --vpp 2 --schedule interleaved --no-with-stack --skew-us 300
    """
    from ..synth import SynthConfig, synthesize

    start = time.perf_counter()
    cfg = SynthConfig(**knobs)
    synthesize(cfg, outdir)
    click.echo(f"wrote a {cfg.world}-rank job (tp {cfg.tp}, pp {cfg.pp}, dp {cfg.dp}, "
               f"cp {cfg.cp}, ep {cfg.ep}, vpp {cfg.vpp}) to {outdir} in "
               f"{time.perf_counter() - start:.1f} s", err=True)


@main.command()
@click.argument("inputs", nargs=-1, required=True, type=Input())
@output_option("-o", "--output", "outdir",
              help="Folder for the tables (CSV and parquet) and figures (PNG) [default: "
                   "traceviz-out/<job>/breakdown].")
@click.option("--ranks", help="Comma-separated ranks to analyse [default: all].")
@click.option("--iterations", help="Comma-separated ProfilerStep numbers [default: all].")
@click.option("--streams", help="Comma-separated streams [default: all].")
@click.option("--drop-last-step", is_flag=True,
              help="Drop the last ProfilerStep, as HTA does by default.")
@click.option("--hta-compat", is_flag=True,
              help="Reproduce HTA: µs rounding, its kernel types, last step dropped.")
@click.option("--kernel-wait-us", type=float, default=30.0, show_default=True,
              help="Gaps shorter than this between kernels of a stream are kernel_wait.")
@click.option("--runtime-cutoff-us", type=float, default=50.0, show_default=True,
              help="Launch statistics: a launch call longer than this is a runtime outlier "
                   "(and one at most this long launching a shorter kernel a short kernel).")
@click.option("--launch-delay-cutoff-us", type=float, default=100.0, show_default=True,
              help="Launch statistics: a kernel starting later than this after its launch "
                   "call ended is a launch-delay outlier.")
@click.option("--num-kernels", type=click.IntRange(min=1), default=10, show_default=True,
              help="Named kernels per rank and type in the top-kernel table.")
@click.option("--duration-ratio", type=click.FloatRange(0, 1), default=0.8,
              show_default=True, help="Share of a type's time the named kernels cover.")
@workers_options
def breakdown(inputs, outdir, ranks, iterations, streams, drop_last_step, hta_compat,
              kernel_wait_us, runtime_cutoff_us, launch_delay_cutoff_us, num_kernels,
              duration_ratio, jobs, scheduler) -> None:
    """HTA-style GPU time analyses of traces or parsed tables (files or folders).

    Temporal breakdown (idle / compute / non-compute, and compute-only / overlapped /
    comm-only / memory-only per rank and iteration), comm-computation overlap,
    kernel-type breakdown, top kernels per rank and type (with their duration
    distribution across ranks), idle time per stream by cause, kernel launch statistics,
    queue length and memcpy bandwidth summaries.

    \b
    Examples:
      traceviz breakdown job/iteration_10 -o breakdown/
      traceviz breakdown rank0.json.gz --hta-compat
    """
    interpret_small_traces(inputs)
    from ..analysis.activities import Options
    from ..analysis.breakdown import Params
    from ..commands import breakdown as command

    opts = Options(drop_last_step=drop_last_step or hta_compat,
                   iterations=int_list(iterations), streams=int_list(streams),
                   hta_compat=hta_compat)
    params = Params.from_us(kernel_wait_us, runtime_cutoff_us, launch_delay_cutoff_us,
                            num_kernels=num_kernels, duration_ratio=duration_ratio)
    result = command.run(list(inputs), opts, ranks=int_list(ranks), params=params,
                         jobs=jobs, scheduler=scheduler)
    finish(result, outdir or command_output("breakdown", inputs[0]))


@main.command()
@click.argument("control", type=Input())
@click.argument("test", type=Input())
@output_option("-o", "--output", "outdir",
              help="Folder for trace_diff.csv / .parquet and trace_diff.png [default: "
                   "traceviz-out/<control>_vs_<test>].")
@click.option("--control-rank", type=int, help="Rank of CONTROL [default: its lowest].")
@click.option("--test-rank", type=int, help="Rank of TEST [default: its lowest].")
@click.option("--control-iterations", help="Comma-separated ProfilerStep numbers "
              "[default: the first].")
@click.option("--test-iterations", help="Comma-separated ProfilerStep numbers "
              "[default: the first].")
@click.option("--full-names", is_flag=True,
              help="Compare full names (default: short names, arguments and templates "
              "stripped).")
@click.option("--hta-compat", is_flag=True,
              help="HTA's short names exactly (they empty Python's <built-in ...> names and "
                   "drop '(anonymous namespace)').")
def diff(control, test, outdir, control_rank, test_rank, control_iterations,
         test_iterations, full_names, hta_compat) -> None:
    """Compare two traces: kernels and CPU ops added, deleted, run more or less often,
    and their change in total time (HTA's trace diff).

    CONTROL and TEST are traces, parsed tables (with their .cpu.parquet for the CPU
    side) or folders of them.

    \b
    Examples:
      traceviz diff baseline/rank0.json.gz candidate/rank0.json.gz -o diff/
      traceviz diff run_a/ run_b/ --control-rank 3 --test-rank 3 --full-names
    """
    interpret_small_traces([control, test])
    from ..commands import diff as command

    result = command.run(control, test, control_rank=control_rank, test_rank=test_rank,
                         control_iterations=int_list(control_iterations),
                         test_iterations=int_list(test_iterations), full_names=full_names,
                         hta_compat=hta_compat)
    finish(result, outdir or command_output("diff", control, test))


@main.command()
@click.argument("traces", nargs=-1, required=True, type=Input())
@output_option("-o", "--output", help="Output file (one trace) or folder [default: "
              "traceviz-out/<trace>/x_with_counters.json.gz per trace].")
@click.option("--series", default="queue_length,memcpy_bandwidth", show_default=True,
              help="Comma-separated counter tracks to add.")
def counters(traces, output, series) -> None:
    """Copy traces with counter tracks added: launch-queue length per stream and memcpy /
    memset bandwidth (HTA's generate_trace_with_counters). Open them in Perfetto UI or
    chrome://tracing.

    \b
    Examples:
      traceviz counters rank0.json.gz        # writes rank0_with_counters.json.gz
      traceviz counters job/*.json -o counters/ --series queue_length
    """
    interpret_small_traces(traces)
    from ..commands import counters as command

    failed = 0
    for trace in traces:  # each on its own: one that fails is named, the others written
        try:
            result = command.run(trace, command.output_for(trace, output, len(traces)),
                                 command.series_of(series))
            write(result, ".")
        except UsageError:
            raise
        except TraceVizError as exc:
            click.echo(f"traceviz: error: {one_line(str(exc))}", err=True)
            failed += 1
            continue
        click.echo(f"{result.value.output}: {result.value.events} counter events added")
    if failed:
        raise SystemExit(1)


@main.command()
@click.argument("path", type=Input(exists=True))
@click.option("--rank", type=int, help="Model this one rank of a job.")
@click.option("--peak-tflops", type=float,
              help="Dense BF16 peak per GPU [default: the device's, from its name].")
@output_option("-o", "--output", "outdir", help="Folder for the op tables and figures "
              "[default: traceviz-out/<job>/ops].")
@workers_options
def ops(path, rank, peak_tflops, outdir, jobs, scheduler) -> None:
    """Op-level performance model: FLOPs and bytes of every GEMM, attention, convolution
    and elementwise / norm / softmax call from its recorded shapes (record_shapes), the
    GPU time of the kernels it launched, achieved TFLOP/s and TB/s and % of the device's
    peak; per op shape and phase; what was not modelled; GPU time per model module;
    MFU from the trace's own FLOPs; a roofline.

    \b
    Examples:
      traceviz ops rank0.json.gz
      traceviz ops job/iteration_10 --peak-tflops 989.5
    """
    interpret_small_traces([path])
    from ..commands import ops as command

    result = command.run(path, rank=rank, peak_tflops=peak_tflops, jobs=jobs,
                         scheduler=scheduler)
    finish(result, outdir or command_output("ops", path))


@main.command("critical-path")
@click.argument("path", type=Input(exists=True))
@click.option("--iteration", type=int, help="The ProfilerStep#N to analyse [default: the "
              "first instance of --annotation].")
@click.option("--annotation", help="Analyse instances of the annotation whose name "
              "contains this (HTA's match) [default: ProfilerStep].")
@click.option("--instance", type=int, default=0, show_default=True,
              help="Which instance of --annotation, 0-based in trace order (negative: "
                   "from the last).")
@click.option("--rank", type=int, help="Analyse this one rank of a job (HTA's model).")
@click.option("--hta-compat", is_flag=True,
              help="HTA's model and whole-µs times (one rank): its path and bound_by "
                   "numbers exactly.")
@click.option("--what-if", "what_if", multiple=True, metavar="WHAT=FACTOR",
              help="Re-time with own times scaled: COMM:TP=0.5, COMM=0.5, COMP=0.8, MEM, "
                   "cpu, launch, kernel:GLOB=0.8, kernel@R:GLOB=0, rank:3=0.5 (repeatable; "
                   "each alone and all together).")
@click.option("--clock-sync/--no-clock-sync", default=True, show_default=True,
              help="Put ranks on one clock from their collectives' ends.")
@output_option("-o", "--output", "outdir", help="Folder for critical_path.csv / .parquet / "
              ".png and the summaries [default: traceviz-out/<job>/critical-path].")
@workers_options
def critical_path(path, iteration, annotation, instance, rank, hta_compat, what_if,
                  clock_sync, outdir, jobs, scheduler) -> None:
    """What bounds an iteration: the critical path through CPU operators, launches, GPU
    kernels and synchronisation, its time by category adding up to the window. One rank
    (a trace, or --rank of a job): HTA's graph (--hta-compat: HTA's path and bound_by
    numbers). A job folder: the ranks joined through their collectives on synced clocks;
    the path's time by category, rank and phase; --what-if re-timings.

    \b
    Examples:
      traceviz critical-path rank0.json.gz --annotation ProfilerStep --instance 1
      traceviz critical-path job/iteration_10 --what-if COMM:TP=0.5 --what-if "kernel:*gemm*=0.8"
    """
    interpret_small_traces([path])
    from ..commands import critical_path as command

    result = command.run(path, iteration=iteration, annotation=annotation,
                         instance=instance, rank=rank, hta_compat=hta_compat,
                         jobs=jobs, scheduler=scheduler,
                         what_if=what_if, clock_sync=clock_sync)
    finish(result, outdir or command_output("critical-path", path))


@main.command()
@click.argument("trace", type=Input())
@click.option("--op", "operator", required=True,
              help="Part of the CPU op name whose kernel sequences to find (e.g. 'aten::linear').")
@click.option("--rank", type=int, help="Rank, when TRACE is a folder [default: its lowest].")
@click.option("--min-len", type=click.IntRange(min=1), default=3, show_default=True,
              help="Fewest kernels a sequence has.")
@click.option("--top-k", type=click.IntRange(min=1), default=5, show_default=True,
              help="Sequences printed and drawn.")
@output_option("-o", "--output", "outdir",
              help="Folder for frequent_sequences.csv / .parquet / .png [default: "
                   "traceviz-out/<trace>/sequences].")
def sequences(trace, operator, rank, min_len, top_k, outdir) -> None:
    """Frequent CUDA kernel sequences launched by a CPU operator (HTA's
    get_frequent_cuda_kernel_sequences): each outermost op whose name contains --op,
    with the kernels it launches in GPU order; identical sequences counted.

    \b
    Examples:
      traceviz sequences rank0.json.gz --op aten::linear
      traceviz sequences job/iteration_10 --rank 3 --op "autograd::engine" --min-len 2
    """
    interpret_small_traces([trace])
    from ..commands import sequences as command

    result = command.run(trace, operator, rank, min_len, top_k)
    finish(result, outdir or command_output("sequences", trace))


@main.command()
@click.argument("root", type=click.Path(exists=True))
@output_option("-o", "--output", "outdir", help="Folder for the parsed tables "
              "[default: traceviz-out/<job>].")
@click.option("--folders", help="Only traces in folders whose name matches this glob "
              "(e.g. 'iteration_*').")
@click.option("-j", "--jobs", type=click.IntRange(min=0), default=0,
              help="Worker processes [default: one per core, at most one per trace].")
@click.option("--force", is_flag=True, help="Re-parse traces whose table is up to date.")
@click.option("--memory-budget", type=click.IntRange(min=16), default=512, show_default=True,
              help="MB per worker (each parse's memory budget, as in 'parse').")
@topology_option
@click.option("--vpp", type=click.IntRange(min=1),
              help="Model chunks per pipeline stage (interleaved schedule) [default: found "
                   "from the trace].")
@click.option("--cpu", is_flag=True, help="Also write each rank's CPU table.")
@click.option("--scheduler", help="Run on a Dask cluster: tcp://HOST:PORT, or 'local'.")
@click.option("--dask", "use_dask", is_flag=True, help="Same as --scheduler local.")
@click.option("-q", "--quiet", is_flag=True, help="No progress bar.")
def batch(root, outdir, folders, jobs, force, memory_budget, topology_file, vpp, cpu,
          scheduler, use_dask, quiet) -> None:
    """Parse every rank trace under ROOT in parallel (any known layout).

    Failed ranks are listed with their reason (exit 1), the others are kept; tables
    newer than their trace are not parsed again.

    \b
    Examples:
      traceviz batch tensorboard_dir/ -j 8
      traceviz batch tensorboard_dir/ --folders 'iteration_*' -o parsed/
      traceviz batch /shared/job --scheduler tcp://10.0.0.5:8786
    """
    from ..ingest import batch as runner

    start = time.perf_counter()
    outcomes = runner.run(root, outdir, folders=folders, jobs=jobs, force=force,
                          memory_budget=memory_budget << 20, topology=topology_file,
                          cpu=cpu, vpp=vpp, scheduler=scheduler or ("local" if use_dask
                                                                    else None),
                          quiet=quiet)
    click.echo(runner.summary(outcomes, time.perf_counter() - start))
    click.echo(f"tables in {runner.output_root(root, outdir)}", err=True)
    if any(o.status == "failed" for o in outcomes):
        raise SystemExit(1)


@main.command()
@click.argument("root", type=click.Path(exists=True))
@output_option("-o", "--output", "outdir", help="Batch output folder holding the rank "
              "tables [default: traceviz-out/<job>]; traces without tables are parsed first.")
@click.option("--alignment", type=click.Choice(["synced", "global", "individual"]),
              default="synced", show_default=True,
              help="synced: clocks corrected from collective end times; global: raw "
              "clocks; individual: each rank from its own first kernel.")
@topology_option
@click.option("-j", "--jobs", type=click.IntRange(min=0), default=0,
              help="Worker processes for traces still to parse and for reading each "
              "rank's tables [default: one per core].")
@click.option("--scheduler", help="Parse the traces still to parse and read each rank's "
              "tables on a Dask cluster: tcp://HOST:PORT, or 'local'.")
@click.option("--no-figures", is_flag=True, help="Tables only.")
@click.option("--rank-figures", type=click.Choice(["auto", "all", "none"]), default="auto",
              show_default=True,
              help="Per-rank figures: auto draws every rank up to 64 ranks, beyond that the "
              "representative ones (least and most idle, p5-p95).")
def aggregate(root, outdir, alignment, topology_file, jobs, scheduler, no_figures,
              rank_figures) -> None:
    """Per-rank micro-batch overlap, category spans, clock offsets and the
    Megatron-TraceViz figures (per rank, per PP group, per model replica).

    \b
    Examples:
      traceviz aggregate tensorboard_dir/
      traceviz aggregate tensorboard_dir/ --alignment global --topology groups.txt
    """
    from ..commands import aggregate as command

    res = command.run(root, outdir, alignment=alignment, topology=topology_file, jobs=jobs,
                      figures=not no_figures, rank_figures=rank_figures,
                      scheduler=scheduler)
    finish(res, res.value.root)


@main.command()
@click.argument("outdir", default="traceviz_demo", type=click.Path(file_okay=False))
def demo(outdir) -> None:
    """Synthesize a small Megatron-like job (tp2 pp4 dp2, 8 micro-batches) and run
    batch, aggregate, breakdown, report, pipeline and html on it; prints where
    everything went.

    \b
    Examples:
      traceviz demo                 # into ./traceviz_demo
      traceviz demo /tmp/tv_demo
    """
    from ..demo import run as run_demo

    echo_all(run_demo(outdir, click.echo).lines)


@main.command()
@click.argument("root", type=click.Path(exists=True))
@click.option("--vpp", type=click.IntRange(min=1),
              help="Model chunks per stage (interleaved 1F1B) [default: as the tables were "
                   "parsed, found from the traces].")
@click.option("--iteration", type=int, help="ProfilerStep number [default: the first].")
@click.option("--all-groups", is_flag=True, help="Every PP group, not only the first "
              "complete one.")
@topology_option
@output_option("-o", "--output", "outdir",
              help="Folder for pipeline_stages.csv / .parquet and the figures [default: "
                   "traceviz-out/<job>/pipeline].")
def pipeline(root, vpp, iteration, all_groups, topology_file, outdir) -> None:
    """Pipeline schedule per PP stage, measured vs ideal 1F1B / interleaved: bubble per
    stage (F/B window and whole iteration), warm-up / steady / cool-down, the critical
    stage and the largest gaps, PNG and an interactive HTML (no server needed).

    ROOT is a job folder (parsed and aggregated first when needed), or a folder of
    PP-Schedule-Visualization timer dumps (event_times_PP*_VPP*_..._rank_*.json).

    \b
    Examples:
      traceviz pipeline tensorboard_dir/
      traceviz pipeline job/ --vpp 2 --all-groups -o pp/
      traceviz pipeline pp_timer_logs/ -o pp/
    """
    from ..commands import pipeline as command

    result = command.run(root, vpp=vpp, iteration=iteration, all_groups=all_groups,
                         topology=topology_file)
    finish(result, outdir or command_output("pipeline", root))


@main.command()
@click.argument("root", type=Input())
@topology_option
@output_option("-o", "--output", "outdir",
              help="Folder for the tables and diagnosis.txt [default: "
                   "traceviz-out/<job>/diagnose].")
@click.option("--advice/--no-advice", default=True, show_default=True,
              help="End with advice, each saving predicted by re-timing the job's graph "
                   "(parses the ranks' CPU tables).")
@click.option("--num-layers", type=click.IntRange(min=1),
              help="The model's transformer layers (Megatron's --num-layers) [default: "
                   "counted from the attention kernels where the trace shows them].")
@click.option("--link-gbps", help="Nominal bus bandwidth within a node and across nodes, "
                                  "GB/s, e.g. 450,50: a group alone of its kind is slow "
                                  "below a quarter of it.")
@workers_options
def diagnose(root, topology_file, outdir, advice, num_layers, link_gbps, jobs,
             scheduler) -> None:
    """Who waits for whom in one profiled iteration's ranks: every communication kernel
    split into wait (for the last member of its call, on synced clocks) and transfer,
    each rank's time ledger (compute, exposed transfer per group, pipeline bubble,
    waiting for a rank, gradient sync, CPU bound, idle: parts that add up to the
    iteration), the stragglers (ranks slower than their peers on the same kernels), and
    advice: what to change, ranked by the saving a what-if predicts.

    \b
    Writes comm_calls, ledger, ledger_waits, ledger_totals, stragglers, peer_speed,
    wait_chain, links, advice (.csv and .parquet) and diagnosis.txt.

    \b
    On an op timeline (per-op timers of every rank and step: README, Op timelines)
    it diagnoses the steps instead and writes op_steps, op_ledger, op_stragglers,
    op_attribution, op_worker_steps, advice, diagnosis.txt, op_slowdown.png and
    op_heatmap.png (--num-layers: the model's layers, for the stage split).

    \b
    Examples:
      traceviz diagnose job/iteration_10
      traceviz diagnose tensorboard_dir/ -o diag/
    """
    from ..commands import diagnose as command

    result = command.run(root, topology=topology_file, advice=advice,
                         num_layers=num_layers, link_gbps=link_rates(link_gbps), jobs=jobs,
                         scheduler=scheduler)
    finish(result, outdir or command_output("diagnose", root))


@main.command()
@click.argument("path", type=Input())
@click.option("--rank", type=int, help="Only this rank of a job.")
@output_option("-o", "--output", "outdir",
              help="Folder for the tables and memory.png [default: traceviz-out/<job>/memory].")
def memory(path, rank, outdir) -> None:
    """Where GPU memory goes: from the caching allocator's events of a trace or of every
    rank of a job (profile with profile_memory=True), per rank the timeline of allocated
    and reserved bytes (each event with its op, module, phase and micro-batch), the peak
    and what is live at it by where it was allocated (before the trace: parameters and
    optimizer state; each forward micro-batch's activations; gradients and temporaries)
    and by op, per pipeline stage, and a figure.

    \b
    Writes memory_timeline, memory_peak, memory_peak_ops, memory_ranks (.csv and
    .parquet) and memory.png.

    \b
    Examples:
      traceviz memory rank0_memory.json.gz
      traceviz memory job/iteration_10 --rank 0
    """
    from ..commands import memory as command

    result = command.run(path, rank=rank)
    finish(result, outdir or command_output("memory", path))


@main.command()
@click.argument("dumps", type=click.Path())
@click.option("--world", type=click.IntRange(1, 1 << 20),
              help="The job's ranks (1 to 1,048,576) [default: those its groups name]; a "
                   "dump of a rank beyond is named and left out.")
@output_option("-o", "--output", "outdir",
              help="Folder for hang.csv / .parquet, hang_groups and hang.json [default: "
                   "traceviz-out/<folder>/hang].")
def hang(dumps, world, outdir) -> None:
    """Who hangs the job: read every rank's NCCL Flight Recorder dump (pickle or JSON,
    one file per rank: TORCH_NCCL_DEBUG_INFO_TEMP_FILE + rank, written on a timeout with
    TORCH_NCCL_TRACE_BUFFER_SIZE set) and name the rank(s) that never entered the
    collectives the others wait in, what every other rank waits in and for whom (the
    chain of waits), collectives whose members disagree on op or size, and deadlocks.
    Dumps are read as plain data only: a pickle that names any class is refused.

    \b
    Examples:
      traceviz hang /tmp/nccl_dumps/
      traceviz hang dumps/ -o hang/
    """
    from ..commands import hang as command

    result = command.run(dumps, world)
    finish(result, outdir or command_output("hang", dumps))


@main.command()
@click.argument("root", type=Input())
@click.option("--config", "config_file", type=click.Path(dir_okay=False),
              help="TorchTitan train config (TOML): model, batch, sequence length, "
                   "parallelism.")
@run_options
@click.option("--no-clock-sync", is_flag=True,
              help="Use each rank's own clock (no offsets from collective ends).")
@output_option("-o", "--output", help="Text report path [default: traceviz-out/<job>/report/"
              "<time>_<model>_dp<X>_tp<Y>_pp<Z>_gpu<N>.txt]; the JSON twin sits next to it.")
@click.option("--json", "as_json", is_flag=True, help="Print the JSON report, not the text.")
@workers_options
def report(root, config_file, topology, no_clock_sync, output, as_json, jobs, scheduler,
           **facts) -> None:
    """Collectives and throughput report of one profiled iteration's ranks (traces or
    'traceviz batch' tables): throughput and MFU, overlap, bus bandwidth per collective
    and parallel group (nccl-tests definitions), and cross-rank matching (arrival skew,
    transfer-time bandwidth, stragglers, slowest calls).

    \b
    Examples:
      traceviz report job/iteration_10 --global-batch-size 64 --seq-len 4096 --params 8
      traceviz report outputs/profile_trace/iteration_10 --config llama3_8b.toml -o r.txt
    """
    from ..commands import report as command

    result = command.run(root, config_file=config_file, output=output, topology=topology,
                         clock_sync=not no_clock_sync, jobs=jobs, scheduler=scheduler,
                         **facts)
    files = result.value
    finish(result, lines=result.texts[str(files.json if as_json else files.text)].splitlines(),
           wrote=f"{files.text}, {files.json} and every rank's numbers in {files.ranks}.csv "
           "/ .parquet")


@main.command()
@click.argument("source", type=Input())
@output_option("-o", "--output", help="Output .json.gz (or .json for a job) [default: "
              "traceviz-out/<job>/<name>_traceviz.json.gz].")
@click.option("--kernels/--no-kernels", default=None,
              help="Also write every GPU kernel as a slice [default: for a job only; a "
                   "trace keeps its own].")
@click.option("--no-clock-sync", is_flag=True, help="Keep each rank's own clock.")
def export(source, output, kernels, no_clock_sync) -> None:
    """Chrome trace (Perfetto UI, chrome://tracing) with traceviz's classification as
    tracks per rank: micro-batch steps by phase, collectives by parallel group with their
    size and bus bandwidth, a collectives-in-flight counter.

    SOURCE is one trace (written back whole, with the tracks added) or a folder of one
    profiled iteration's ranks (one file of every rank's kernels and tracks on
    clock-synced time; its traces are parsed once into SOURCE/traceviz by 'traceviz
    batch' when it has no tables yet).

    \b
    Examples:
      traceviz export rank0.pt.trace.json.gz -o rank0_annotated.json.gz
      traceviz export job/iteration_10 -o job_iter10.json.gz
    """
    interpret_small_traces([source])
    from ..commands.export import run

    result = run(source, output, kernels, clock_sync=not no_clock_sync)
    finish(result, wrote=lambda: f"{one_line(str(result.value.output))} "
           f"({result.value.events} traceviz events); open it in https://ui.perfetto.dev")


@main.command()
@click.argument("root", type=Input())
@output_option("-o", "--output", help="The HTML file [default: traceviz-out/<job>/report.html].")
@click.option("--hang", "dumps", type=click.Path(exists=True),
              help="A folder of the job's NCCL Flight Recorder dumps: a hang section.")
@run_options
@workers_options
def html(root, output, dumps, topology, jobs, scheduler, **facts) -> None:
    """One self-contained HTML page (figures embedded, no server, no network) for a job:
    summary (layout, iteration time, MFU), overlap per rank, pipeline view, top kernels,
    collectives and stragglers, linked to each other; where the ranks' traces have
    allocator events (profile_memory=True) and were parsed with their CPU tables, where
    GPU memory goes; with --hang, who hangs the job.

    ROOT is a job folder of one profiled iteration (traces are parsed first when there
    are no 'traceviz batch' tables yet).

    \b
    Examples:
      traceviz html job/ -o job.html --global-batch-size 64 --seq-len 4096 --params 8
    """
    from ..commands import html as command

    output = output or command_output("html", root)
    finish(command.run(root, output, topology=topology, dumps=dumps, jobs=jobs,
                       scheduler=scheduler, **facts), wrote=output)
