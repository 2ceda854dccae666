"""``python -m traceviz`` is the ``traceviz`` command."""
from .cli import main

main()
