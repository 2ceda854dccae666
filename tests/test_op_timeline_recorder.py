"""The Megatron patch's op-timeline recorder (``megatron/training/traceviz_timeline.py``
in ``patch/enable_traceviz.patch``), run as the patch adds it, on stand-ins for torch's
CUDA events and Megatron's timers and parallel state: what it writes is an op timeline
traceviz reads, with every timer of every step, the micro-batches numbered as Megatron's
schedule runs them, times on the events' clock, no synchronisation before exit."""
from __future__ import annotations

import sys
import types
from pathlib import Path

import numpy as np
import pytest

from traceviz.ingest.op_timeline import read_op_timeline

PATCH = Path(__file__).resolve().parents[1] / "patch" / "enable_traceviz.patch"
MODULE = "megatron/training/traceviz_timeline.py"


def _added_file(path: str) -> str:
    """The new file ``path`` as the patch adds it."""
    lines, inside = [], False
    for line in PATCH.read_text().splitlines():
        if line.startswith("diff --git"):
            inside = line.endswith(f"b/{path}")
            continue
        if inside and line.startswith("+") and not line.startswith("+++"):
            lines.append(line[1:])
    assert lines, f"{path} not in the patch"
    return "\n".join(lines) + "\n"


class _Clock:
    """The GPU's clock (ms): events record the time the test says the GPU is at."""

    now = 0.0
    synchronized = 0


class _Event:
    def __init__(self, enable_timing=False):
        self.t = None

    def record(self):
        self.t = _Clock.now

    def query(self):
        return True

    def synchronize(self):
        pass

    def elapsed_time(self, other):
        return other.t - self.t


@pytest.fixture()
def recorder(monkeypatch, tmp_path):
    """The recorder module with torch / megatron stand-ins; (module, args, Timers)."""
    torch = types.ModuleType("torch")
    cuda = types.SimpleNamespace(Event=_Event, is_available=lambda: True,
                                 synchronize=lambda: setattr(_Clock, "synchronized",
                                                             _Clock.synchronized + 1))
    torch.cuda = cuda
    torch.distributed = types.SimpleNamespace(is_initialized=lambda: True,
                                              get_rank=lambda: 6)
    args = types.SimpleNamespace(curr_iteration=0)
    ps = types.ModuleType("megatron.core.parallel_state")
    ps.get_pipeline_model_parallel_rank = lambda: 1
    ps.get_data_parallel_rank = lambda: 2
    ps.get_tensor_model_parallel_rank = lambda: 0
    ps.get_virtual_pipeline_model_parallel_rank = lambda: None
    gv = types.ModuleType("megatron.training.global_vars")
    gv.get_args = lambda: args
    megatron = types.ModuleType("megatron")
    core = types.ModuleType("megatron.core")
    core.parallel_state = ps
    training = types.ModuleType("megatron.training")
    for name, mod in (("torch", torch), ("megatron", megatron), ("megatron.core", core),
                      ("megatron.core.parallel_state", ps), ("megatron.training", training),
                      ("megatron.training.global_vars", gv)):
        monkeypatch.setitem(sys.modules, name, mod)
    module = types.ModuleType("traceviz_timeline")
    exec(compile(_added_file(MODULE), MODULE, "exec"), module.__dict__)
    monkeypatch.setenv("TRACEVIZ_OP_TIMELINE", str(tmp_path / "timeline"))
    monkeypatch.setenv("TRACEVIZ_OP_TIMELINE_FLUSH", "2")
    _Clock.now, _Clock.synchronized = 0.0, 0

    class Dummy:  # Megatron's timer below its log level
        def start(self, barrier=False):
            pass

        def stop(self, barrier=False):
            pass

        def elapsed(self, reset=True, barrier=False):
            return 0.0

    class Timers:
        def __call__(self, name, log_level=None):
            return Dummy()

    return module, args, Timers


def _run(timers, args, steps=3, microbatches=2):
    """A 1F1B-like step: the forward (data loading inside), a send, the backward, the
    gradients' sync and the optimizer; each op 1 ms on the GPU, 0.5 ms between ops."""
    def op(name, inner=None):
        _Clock.now += 0.5
        timers(name).start()
        if inner:
            timers(inner).start()
            _Clock.now += 0.25
            timers(inner).stop()
        _Clock.now += 1.0
        timers(name).stop()

    for step in range(10, 10 + steps):
        args.curr_iteration = step
        timers("forward-backward", log_level=1).start()
        for _ in range(microbatches):
            op("forward-compute", inner="batch-generator")
            op("forward-send")
        for _ in range(microbatches):
            op("backward-compute")
        op("all-grads-sync")
        timers("forward-backward").stop()
        op("optimizer")


def test_recorder_writes_an_op_timeline(recorder, tmp_path):
    module, args, Timers = recorder
    timers = Timers()
    module.install(timers)
    assert type(timers).__name__ == "RecordedTimers"
    _run(timers, args)
    assert _Clock.synchronized == 0  # nothing waited on the GPU before exit
    module._recorder.close()
    folder = tmp_path / "timeline"
    files = sorted(p.name for p in folder.rglob("*.csv"))
    # written every second step and at exit, one file per rank and flush
    assert files == ["steps_10-11.csv", "steps_12-12.csv"], files
    tl = read_op_timeline(folder)
    assert set(tl.names) == {"forward-compute", "batch-generator", "forward-send",
                             "backward-compute", "all-grads-sync", "optimizer"}
    assert sorted(np.unique(tl.step).tolist()) == [10, 11, 12]
    assert (tl.rank == 6).all() and tl.stage.tolist() == [1] and tl.dp.tolist() == [2]
    for step in (10, 11, 12):
        mine = tl.step == step
        names = [tl.names[o] for o in tl.op[mine]]
        assert names.count("forward-compute") == 2 and names.count("optimizer") == 1
        fwd = mine & (tl.op == tl.names.index("forward-compute"))
        assert sorted(tl.microbatch[fwd].tolist()) == [0, 1]
        bg = mine & (tl.op == tl.names.index("batch-generator"))
        assert sorted(tl.microbatch[bg].tolist()) == [0, 1]
        # every op took 1 ms (the forward 1.25 with its data loading inside), 0.5 ms apart,
        # the step starting at the forward-backward timer
        assert tl.dur[fwd].tolist() == [1_250_000, 1_250_000]
        assert tl.start[mine].min() == 500_000
    comp = tl.op == tl.names.index("backward-compute")
    assert (tl.dur[comp] == 1_000_000).all()


def test_recorder_off_without_the_variable(recorder, monkeypatch):
    module, _, Timers = recorder
    monkeypatch.delenv("TRACEVIZ_OP_TIMELINE")
    timers = Timers()
    module.install(timers)
    assert type(timers) is Timers and module._recorder is None
