"""Parallel groups of a Megatron job: rank layout, the topology text file, from traces."""
