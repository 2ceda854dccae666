"""Bounds no real input crosses: a number beyond one is a wrong number (or a hostile
one), refused or read as unknown before anything is built from it."""

# far above any job run today (~1e5 GPUs); a larger world size is a wrong number, and
# building its groups (or a footer's world group's ranks) would exhaust memory
MAX_WORLD = 1 << 20
