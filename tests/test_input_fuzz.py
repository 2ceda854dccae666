"""Fuzz test over the other files a user hands traceviz: a Megatron groups file (the
text and JSON forms) and a TorchTitan config, mutated at random (numbers made huge,
negative, zero or words; lines dropped, repeated or cut; bytes flipped; control
characters), given to the commands that read them. Every run either succeeds or ends
with one line naming the file; never an internal error, a traceback, or a control
character on the terminal."""
from __future__ import annotations

import random
import re

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from traceviz.cli import main
from traceviz.synth import SynthConfig, synthesize

CONFIG = b"""[job]
dump_folder = "./outputs"

[model]
name = "llama3"
flavor = "8B"

[training]
local_batch_size = 2
seq_len = 4096
steps = 100

[parallelism]
data_parallel_replicate_degree = 1
data_parallel_shard_degree = -1
tensor_parallel_degree = 2
pipeline_parallel_degree = 2
context_parallel_degree = 1
"""
NUMBERS = [b"0", b"-1", b"-7", b"2000000000", b"99999999999999999999999", b"1e308",
           b"3.5", b"two", b'"2"', b"nan", b"inf", b"true", b"[]", b"{}", b"\x00",
           b"\xff\xfe", b"\x1b[31m"]


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    """An 8-rank job (tp2 pp2 dp2), parsed, and its groups file in both forms."""
    root = tmp_path_factory.mktemp("fuzzjob")
    synthesize(SynthConfig(tp=2, pp=2, dp=2, microbatches=2, layers=2, seed=5),
               root / "job")
    assert CliRunner().invoke(main, ["batch", str(root / "job"), "-q",
                                     "-o", str(root / "tables")]).exit_code == 0
    text = root / "groups.txt"
    r = CliRunner().invoke(main, ["topology", "--world", "8", "--tp", "2", "--pp", "2",
                                  "-o", str(text)])
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(main, ["topology", "--from-file", str(text), "--json"])
    assert r.exit_code == 0, r.output
    return root / "tables" / "iteration_10", text.read_bytes(), r.stdout.encode()


def mutate(data: bytes, kind: str, r: random.Random) -> bytes:
    lines = data.split(b"\n")
    if kind == "number":  # every form a number can wrongly take, at one or more places
        spots = list(re.finditer(rb"-?\d+", data))
        for m in sorted(r.sample(spots, min(len(spots), r.randint(1, 3))),
                        key=lambda m: -m.start()):
            data = data[:m.start()] + r.choice(NUMBERS) + data[m.end():]
        return data
    if kind == "drop":
        del lines[r.randrange(len(lines))]
    elif kind == "repeat":
        i = r.randrange(len(lines))
        lines[i:i] = [lines[i]] * r.randint(1, 50)
    elif kind == "cut":
        return data[:r.randrange(len(data))]
    elif kind == "flip":
        i = r.randrange(len(data))
        return data[:i] + bytes([data[i] ^ r.randrange(1, 256)]) + data[i + 1:]
    elif kind == "control":
        i = r.randrange(len(data))
        return data[:i] + r.choice([b"\x00", b"\x1b[2J", b"\x07", b"\r", b"\xe2\x80\xae"]) \
            + data[i:]
    elif kind == "big_group":  # a group listing a huge rank or a huge list of ranks
        i = r.randrange(len(lines))
        lines.insert(i, r.choice([b"Group 9: [0, 4294967296]", b"Group 9: [" +
                                  b", ".join(b"%d" % k for k in range(20000)) + b"]",
                                  b"World Size: 2000000000", b"TP Size: 0",
                                  b'{"world": 2000000000}']))
    return b"\n".join(lines)


KINDS = st.sampled_from(["number", "drop", "repeat", "cut", "flip", "control", "big_group"])


def _check(result, path) -> None:
    """Success, or one line that names ``path``; nothing raw on the terminal."""
    assert result.exit_code in (0, 1, 2), result.output
    assert "internal error" not in result.output and "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), \
        repr(result.exception)
    assert not re.search(r"[\x00-\x08\x0b-\x1f\x7f\u202e]", result.output), result.output
    if result.exit_code:
        error = [x for x in result.stderr.splitlines() if "rror" in x]
        assert len(error) == 1 and str(path) in error[0], result.stderr


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(seed=st.integers(0, 2**32 - 1), kind=KINDS, form=st.sampled_from(["text", "json"]))
def test_mutated_groups_files(job, tmp_path_factory, seed, kind, form):
    tables, text, as_json = job
    path = tmp_path_factory.mktemp("groups") / f"groups.{'txt' if form == 'text' else 'json'}"
    path.write_bytes(mutate(text if form == "text" else as_json, kind, random.Random(seed)))
    _check(CliRunner().invoke(main, ["topology", "--from-file", str(path), "--json"]), path)
    _check(CliRunner().invoke(main, ["report", str(tables), "--topology", str(path),
                                     "-o", str(path.parent / "r.txt")]), path)


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(seed=st.integers(0, 2**32 - 1), kind=KINDS)
def test_mutated_torchtitan_configs(job, tmp_path_factory, seed, kind):
    tables, _, _ = job
    path = tmp_path_factory.mktemp("config") / "train.toml"
    path.write_bytes(mutate(CONFIG, kind, random.Random(seed)))
    _check(CliRunner().invoke(main, ["report", str(tables), "--config", str(path),
                                     "-o", str(path.parent / "r.txt")]), path)
