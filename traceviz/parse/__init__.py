"""Trace bytes -> typed columns -> the GPU activity table, in one streaming pass."""
