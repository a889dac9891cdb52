"""A worker forked while its pool shuts down prints nothing; every other worker failure still prints."""

import multiprocess.synchronize as synchronize
import pytest

from pipeline import forkserver_hook


def _raised(call):
    try:
        call()
    except Exception as exc:
        return exc
    raise AssertionError("no exception")


def test_a_worker_whose_pool_semaphore_is_gone_is_quiet(capsys):
    orphan = synchronize.SemLock.__new__(synchronize.SemLock)
    exc = _raised(lambda: orphan.__setstate__((0, 1, 1, "/millrace-test-gone")))
    forkserver_hook._quiet_orphaned_worker(type(exc), exc, exc.__traceback__)
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("call", [lambda: open("/nonexistent/millrace"), lambda: 1 / 0])  # noqa: SIM115  (it fails)
def test_any_other_worker_failure_still_prints_its_traceback(capsys, call):
    exc = _raised(call)
    forkserver_hook._quiet_orphaned_worker(type(exc), exc, exc.__traceback__)
    assert "Traceback" in capsys.readouterr().err
