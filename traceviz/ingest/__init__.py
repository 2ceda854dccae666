"""Build per-rank tables from traces (parse, then classify), find a job's traces in every
layout, run batches on a process pool or Dask, and load tables for the analyses."""
