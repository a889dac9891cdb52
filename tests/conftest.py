import pytest


@pytest.fixture
def home(tmp_path, monkeypatch):
    """An empty $MILLRACE_HOME for one test."""
    root = tmp_path / "home"
    root.mkdir()
    monkeypatch.setenv("MILLRACE_HOME", str(root))
    from millrace.home import Home

    return Home.resolve(root)
