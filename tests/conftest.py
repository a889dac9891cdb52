import signal

import pytest

# A suite started in the background (`nohup make test &` from a script) inherits an ignored SIGINT,
# and so would every command a test starts; the Ctrl-C drills need it delivered.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture
def home(tmp_path, monkeypatch):
    """An empty $MILLRACE_HOME for one test."""
    root = tmp_path / "home"
    root.mkdir()
    monkeypatch.setenv("MILLRACE_HOME", str(root))
    from millrace.home import Home

    return Home.resolve(root)
