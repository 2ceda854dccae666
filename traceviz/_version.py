"""The package version (a leaf module: everything may import it, it imports nothing)."""
__version__ = "0.2.1"
