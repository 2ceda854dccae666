"""Deterministic synthetic Megatron-like multi-rank Kineto traces with ground truth.

Imports only traceviz.topology (and errors, table io): never the parse, classify, ingest
or analysis code it checks, nor their schedule order: a synthesizer that
shares code with what it checks proves nothing.

``synthesize`` is imported on first use: the command line reads :class:`SynthConfig`
to build its options, and every other command would otherwise pay for the writer's
imports (~40 ms).
"""
from .config import SynthConfig

__all__ = ["SynthConfig", "synthesize"]


def __getattr__(name: str):
    if name == "synthesize":
        from .job import synthesize

        return synthesize
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
