"""Every command's --help shows at least one example invocation of that command."""
from __future__ import annotations

import pytest
from click.testing import CliRunner

from traceviz.cli import main


@pytest.mark.parametrize("command", sorted(main.commands))
def test_help_has_an_example(command):
    result = CliRunner().invoke(main, [command, "--help"])
    assert result.exit_code == 0, result.output
    examples = result.output.split("Example", 1)
    assert len(examples) == 2, f"{command} --help has no example"
    assert f"traceviz {command}" in examples[1]
