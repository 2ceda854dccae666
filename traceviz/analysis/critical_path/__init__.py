"""Critical path: what bounds an iteration, on one rank (HTA's model) and across the
ranks of a job, and what-if re-timing of the job's graph."""
