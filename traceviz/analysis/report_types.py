"""The shape of the report (:mod:`traceviz.analysis.report`) as typed dictionaries: what
the text report, the HTML page, the JSON file and ``traceviz.Job.report()`` read, checked
by mypy. Times are ms unless a key says ns, bandwidths GB/s, shares % (None: unknown,
printed n/a)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple, TypedDict

if TYPE_CHECKING:  # the records the report holds (their modules import this one's)
    from .advice import Advice
    from .diagnose.summary import Summary


class Stats(TypedDict):
    """mean / median / p95 / min / max of a quantity over calls (None: no value)."""

    mean: float | None
    median: float | None
    p95: float | None
    min: float | None
    max: float | None


class Configuration(TypedDict):
    gpus: int
    world_size: int
    model: str | None
    global_batch_size: int | None
    seq_len: int | None
    tokens_per_iteration: int | None
    flops_per_token: float | None
    device: str | None
    peak_tflops: float | None
    peak_bw_gbps: float | None
    parallelism: dict[str, int]
    config_parallelism: dict[str, Any]
    config_source: str | None
    iterations: list[int | None]
    ranks: list[int]


class IterationThroughput(TypedDict):
    iteration: int | None
    time_ms: float | None
    tokens_per_s: float | None
    samples_per_s: float | None
    tflops_per_gpu: float | None
    mfu_pct: float | None


class Mfu(TypedDict):
    """The one MFU and TFLOP/s per GPU, with their source (``config`` / ``trace``) or
    why they are unknown."""

    tflops_per_gpu: float | None
    mfu_pct: float | None
    source: str | None
    source_text: str | None
    why: str | None


class TraceFlops(TypedDict):
    """TFLOP/s per GPU from the traced ops' own FLOPs (:mod:`.ops`), or why unknown."""

    tflops_per_gpu: float | None
    why: str | None


class TraceMfu(TraceFlops):
    """:class:`TraceFlops` with the MFU they give (None: unknown, see ``why``)."""

    mfu_pct: float | None


class _Throughput(TypedDict):
    iterations: list[IterationThroughput]
    mean: dict[str, float | None]
    window: str


class Throughput(_Throughput, total=False):
    mfu: Mfu  # the one MFU, chosen with the traced ops' FLOPs when they are given
    trace_flops: TraceFlops


class OverlapRank(TypedDict):
    rank: int
    comm_ms: float
    comp_ms: float
    overlap_ms: float
    overlap_pct: float | None
    pp_stage: int | None


class Overlap(TypedDict):
    per_rank: list[OverlapRank]
    average_pct: float | None
    min_pct: float | None
    max_pct: float | None


class NetworkRank(TypedDict):
    rank: int
    operations: int
    bytes: int | None
    bus_bytes: float | None
    simple_busbw_gbps: float | None
    collective_busbw_gbps: float | None
    pp_stage: int | None


class CommShare(TypedDict):
    """Per collective type or parallel group: counts, bytes, time and bandwidth."""

    name: str
    count: int
    bytes: int | None
    bus_bytes: float | None
    time_ms: float
    avg_time_ms: float
    busbw_gbps: Stats
    algbw_gbps: Stats
    with_size: int
    share_of_iteration_pct: float | None
    hidden_pct: float | None


class Network(TypedDict):
    average_collective_busbw_gbps: float | None
    utilization_pct: float | None
    total_bytes: int | None
    per_rank: list[NetworkRank]
    by_collective: list[CommShare]
    by_group: list[CommShare]


class Traffic(TypedDict):
    name: str
    count: int
    bytes: int | None
    pct_of_bytes: float | None
    avg_time_ms: float


class LastToArrive(TypedDict):
    """A rank that most often arrived last at a group's calls: how often, of how many
    calls it was in, its total and mean delay of the others (ns and ms)."""

    rank: int
    times_last: int
    calls: int
    delay_ns: int
    mean_delay_ns: float
    delay_ms: float
    mean_delay_ms: float


class SlowestCall(TypedDict):
    """One of the calls that moved their data slowest (``transfer_ms``)."""

    group: str
    process_group: str | None
    number: int
    iteration: int
    collective: str | None
    ranks: int
    bytes: int | None
    span_ms: float
    skew_ms: float
    transfer_ms: float
    last_rank: int
    busbw_transfer_gbps: float | None


class CrossRankGroup(TypedDict):
    group: str
    calls: int
    skew_ms: dict[str, float | None]
    mean_wait_ms: float
    busbw_transfer_gbps: Stats
    busbw_kernel_gbps: Stats
    last_to_arrive: list[LastToArrive]


class _CrossRank(TypedDict):
    matched_calls: int
    calls_with_several_ranks: int
    by_group: list[CrossRankGroup]
    slowest_calls: list[SlowestCall]


class CrossRank(_CrossRank, total=False):
    clock_synced: bool
    clocks: str  # how the ranks were put on one clock (render.words.clock_words)


class _Report(TypedDict):
    kind: str
    configuration: Configuration
    throughput: Throughput
    overlap: Overlap
    network: Network
    traffic: list[Traffic]
    cross_rank: CrossRank | None
    notes: list[str]


class Report(_Report, total=False):
    """The whole report :func:`~.report.build_report` makes: its sections, the
    diagnosis (typed: :class:`~.diagnose.summary.Summary`) or why there is none, the
    advice (typed :class:`~.advice.Advice` records), and the ranks left out. JSON only
    at output: :func:`~.report.report_json` (and back: :func:`~.report.from_json`)."""

    diagnosis: Summary | None
    diagnosis_why: str | None
    advice: list[Advice]
    failed: list[str]


class Diagnosed(NamedTuple):
    """What :func:`~.report.build_report` adds of the job's diagnosis: its summary
    (None: none, ``why``), the advice."""

    summary: Summary | None
    why: str | None
    advice: list[Advice]
