"""The contract between stages: the activity table's schema (columns, enums named once,
metadata), parquet / CSV io with atomic writes, and numpy / Arrow array helpers.

Every other subpackage reads the schema from here; this package imports nothing of
traceviz but :mod:`traceviz.errors`.
"""
