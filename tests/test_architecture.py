"""The import rules of the layout (README, Development) hold: ``lint-imports`` checks
the contracts in ``.importlinter`` (data flows one way; the parser knows no training
semantics; analyses neither parse nor draw; the synthesizer shares no code with what it
checks; topology is pure)."""
from __future__ import annotations

import ast
import shutil
import subprocess

from helpers import ROOT


def test_import_contracts_are_kept():
    lint = shutil.which("lint-imports")
    assert lint, "import-linter is a test extra: pip install '.[test]'"
    proc = subprocess.run([lint, "--config", str(ROOT / ".importlinter")], cwd=ROOT,
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "0 broken" in proc.stdout


def test_nothing_inside_imports_the_package_face():
    """The face (traceviz/__init__) is for users; the package's modules import each
    other directly, so ``import traceviz`` stays instant and nothing depends on it."""
    offenders = []
    for path in sorted((ROOT / "traceviz").rglob("*.py")):
        package = path.relative_to(ROOT).parent.parts  # the importing module's package
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                face = any(a.name == "traceviz" for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = package[:len(package) - node.level + 1] if node.level else ()
                face = (node.module == "traceviz" if not node.level
                        else node.module is None and base == ("traceviz",))
            else:
                continue
            if face:
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert offenders == []


def test_import_traceviz_loads_nothing_heavy():
    code = ("import sys, traceviz; heavy = [m for m in ('numba', 'pyarrow', 'matplotlib', "
            "'numpy') if m in sys.modules]; print(heavy)")
    out = subprocess.run([shutil.which("python3") or "python3", "-c", code], cwd=ROOT,
                         capture_output=True, text=True, check=True).stdout.strip()
    assert out == "[]"
