"""``python -m traceviz`` is the ``traceviz`` command."""
from .cli import run

run()
