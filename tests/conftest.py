"""pytest configuration: the tests import their shared helpers from ``helpers.py``; every
test, and every module's shared fixtures, run in an empty folder of their own, so a
command's default outputs (``traceviz-out/``) never land in the checkout nor meet another
test's."""
import pytest


@pytest.fixture(scope="module", autouse=True)
def module_folder(tmp_path_factory):
    """The current folder while a module's shared (module-scoped) fixtures run."""
    folder = tmp_path_factory.mktemp("cwd")
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(folder)
        yield folder


@pytest.fixture(autouse=True)
def _in_tmp_folder(module_folder, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
