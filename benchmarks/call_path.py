"""The path a command takes through traceviz's modules: which files its calls enter (in
the order first entered) and how often a call climbs back up the layers the import
contract (``.importlinter``'s layers) puts them in. A structure measurement, run on two
trees to compare a restructuring (the one on ``PYTHONPATH`` is measured):

    python benchmarks/call_path.py -- diagnose traceviz-demo/job -o /tmp/d

Prints every file with its layer and the number of calls into it, then the calls that
climb (caller in a lower layer than the callee: a callback handed down, such as a lazy
table loader; a generator resumed by its consumer is not counted).
Numba-compiled kernels make no Python calls and are not seen; importing a module is not
a call. Run it on tables parsed
beforehand and without a kept result (delete the tables' ``.traceviz-cache``) to see
the analysis, not the cache.
"""
from __future__ import annotations

import argparse
import configparser
import inspect
import sys
from collections import Counter
from pathlib import Path


def layers(root: Path) -> dict[str, int]:
    """Top-level module -> its layer index (0 the top) from ``.importlinter``."""
    cfg = configparser.ConfigParser()
    cfg.read(root / ".importlinter")
    for section in cfg.sections():
        if cfg[section].get("type") == "layers" and "containers" not in cfg[section]:
            out = {}
            for i, line in enumerate(x for x in cfg[section]["layers"].splitlines()
                                     if x.strip()):
                for module in line.split("|"):
                    out[module.strip()] = i
            return out
    return {}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("command", nargs=argparse.REMAINDER,
                    help="the traceviz command line, after --")
    args = ap.parse_args()
    command = [a for a in args.command if a != "--"]
    import traceviz
    from traceviz.cli import main as cli

    package = Path(traceviz.__file__).resolve().parent
    order = layers(package.parent)
    entered: dict[str, int] = {}  # file -> calls into it (dict keeps first-entry order)
    climbs: Counter = Counter()

    def name_of(filename: str) -> str | None:
        path = Path(filename)
        try:
            return str(Path(package.name) / path.resolve().relative_to(package))
        except ValueError:
            return None

    def layer_of(rel: str) -> int:
        parts = Path(rel).with_suffix("").parts
        for n in range(len(parts), 0, -1):
            key = ".".join(parts[:n])
            if key in order:
                return order[key]
        return len(order)

    cache: dict[str, str | None] = {}

    def module(filename: str) -> str | None:
        """The traceviz file (relative to the tree) of a code object, None: another's."""
        if filename not in cache:
            cache[filename] = name_of(filename)
        return cache[filename]

    def importing(frame) -> bool:
        """Whether ``frame`` runs while a module is imported (not the command's call)."""
        while frame is not None:
            if frame.f_code.co_name == "<module>" and frame.f_code.co_filename != __file__:
                return True
            frame = frame.f_back
        return False

    def profile(frame, event, arg):
        if event != "call":
            return
        mine = module(frame.f_code.co_filename)
        if mine is None or importing(frame):
            return
        entered[mine] = entered.get(mine, 0) + 1
        back = frame.f_back
        while back is not None:  # the nearest traceviz caller
            theirs = module(back.f_code.co_filename)
            if theirs is not None:
                # a generator resumed by its consumer is no call up the layers
                resumed = frame.f_code.co_flags & inspect.CO_GENERATOR
                if theirs != mine and layer_of(mine) < layer_of(theirs) and not resumed:
                    climbs[(theirs, mine)] += 1
                break
            back = back.f_back

    sys.setprofile(profile)
    try:
        cli(command, standalone_mode=False)
    finally:
        sys.setprofile(None)
    print(f"{len(entered)} files of traceviz entered by: traceviz {' '.join(command)}")
    for rel, calls in entered.items():
        print(f"  layer {layer_of(rel)}  {calls:9d} calls  {rel}")
    print(f"{len(climbs)} caller -> callee pairs climb back up the layers "
          f"({sum(climbs.values())} calls):")
    for (a, b), n in climbs.most_common():
        print(f"  {a} (layer {layer_of(a)}) -> {b} (layer {layer_of(b)}): {n}")


if __name__ == "__main__":
    main()
