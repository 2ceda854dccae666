"""What the ``traceviz`` command does at start so a short command starts fast.

numba's first compile or cache load imports its numpy implementations, and one of them
(``numba.np.arraymath``) probes for a BLAS by importing ``scipy.linalg``: ~150 ms of every
command on a machine where SciPy is installed (most ML environments), for a feature
traceviz never uses (no jitted function here calls ``np.dot`` or ``np.linalg``). In the
command's own process that probe is answered "no BLAS" without importing SciPy. Library
users (a notebook) keep numba's normal behaviour: this runs only from the CLI.
"""
from __future__ import annotations

import importlib.abc
import sys

_PROBED = ("scipy", "scipy.linalg", "scipy.linalg.cython_blas")


class _NoBlasProbe(importlib.abc.MetaPathFinder):
    """Fails the import of SciPy's BLAS while (and only while) ``numba.np.arraymath``
    runs its module-level probe: the module is being executed and has not yet set
    ``_HAVE_BLAS``. Any other import of SciPy goes through untouched."""

    def find_spec(self, name, path, target=None):
        if name in _PROBED:
            probing = sys.modules.get("numba.np.arraymath")
            if probing is not None and not hasattr(probing, "_HAVE_BLAS"):
                raise ImportError(f"{name}: not imported by traceviz's command line")
        return None


def skip_numba_blas_probe() -> None:
    """Install the finder (once) ahead of the others."""
    if not any(isinstance(f, _NoBlasProbe) for f in sys.meta_path):
        sys.meta_path.insert(0, _NoBlasProbe())
