"""Figures and text renderings of analysis tables (matplotlib, Agg backend)."""
