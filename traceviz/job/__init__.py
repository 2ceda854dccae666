"""A job and its results, resolved and computed once (:class:`.job.Job`): what every
command, the demo and the notebook API ask; :mod:`.products` computes each result from
the job's tables, :mod:`.report` the collectives and throughput report."""
from __future__ import annotations

from .job import Job

__all__ = ["Job"]
