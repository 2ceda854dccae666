"""One folder, one run: traces that cannot be ranks of one job (two that state no rank,
two that state different job sizes) are a one-line error naming them, never merged into
one job silently (real traces of other people's runs, copied side by side)."""
from __future__ import annotations

import shutil

import pytest
from click.testing import CliRunner

from helpers import shared
from traceviz.cli import main

NO_RANK = ("hta/rank_unavailable/rank_not_found.json.gz",
           "hta/distributed_info_unavailable/distributed_info_not_found.json.gz")
SIZES = ("param/dlrm_kineto/worker1_step_12.1694128201556.pt.trace.json",  # rank 1 of 8
         "hta/nccl_parser_config/nccl_data.json.gz")                        # rank 0 of 2


@pytest.mark.parametrize("traces, says", [
    (NO_RANK, "both state no rank"),
    (SIZES, "traces of separate runs; keep one run's traces in a folder"),
])
@pytest.mark.parametrize("command", ["breakdown", "diagnose"])
def test_traces_of_separate_runs_are_not_one_job(tmp_path, traces, says, command):
    job = tmp_path / "job"
    job.mkdir()
    for t in traces:
        shutil.copy(shared(t), job / shared(t).name)
    r = CliRunner().invoke(main, [command, str(job), "-o", str(tmp_path / "out")])
    assert r.exit_code == 1, r.output
    (line,) = [x for x in r.output.splitlines() if x.startswith("traceviz: error:")]
    assert says in line
    assert all(shared(t).name.split(".")[0] in line for t in traces)
    assert "Traceback" not in r.output
