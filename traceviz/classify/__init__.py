"""Meaning columns for GPU activities: kind, collective type (later: phase, group)."""
