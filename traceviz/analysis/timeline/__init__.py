"""Op timelines (per-op timers of every rank and step): one model for them, its
re-simulation and the diagnosis over the steps (:mod:`.diagnosis`)."""
