"""Deterministic synthetic Megatron-like multi-rank Kineto traces with ground truth.

Never imports traceviz.parse, traceviz.classify or traceviz.analysis: a synthesizer that
shares code with what it checks proves nothing.
"""
from .config import SynthConfig
from .job import synthesize

__all__ = ["SynthConfig", "synthesize"]
