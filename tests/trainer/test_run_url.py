"""A run kept on S3 (moto's server on 127.0.0.1, its own process, stopped by PID): a job restarted on another
node (a home that never saw the run) finds the checkpoint and the records there and continues the same
curve as a straight local run."""

import shutil

import pytest

from millrace.home import Home
from testkit.s3 import s3_server
from trainer.checkpoint import list_checkpoints
from trainer.loop import train
from trainer.records import read_metrics
from trainer.run_url import RemoteDir, read_record
from trainer.train_request import TrainRequest

pytest.importorskip("s3fs")
pytest.importorskip("moto.server")


@pytest.fixture(scope="module")
def s3():
    with s3_server("runs") as server:
        yield server


def other_node(home: Home, tmp_path) -> Home:
    """The same stores and mixtures on a node that has never seen a run."""
    root = tmp_path / "other-node"
    shutil.copytree(home.root, root, ignore=shutil.ignore_patterns("runs"))
    return Home.resolve(root)


def tear(checkpoints: RemoteDir, step: int) -> None:
    """What a crash between DCP's objects and the digests that commit them leaves: every object but digests.json."""
    committed, torn = checkpoints / f"step-{step - 2:08d}", checkpoints / f"step-{step:08d}"
    for name in committed.files():
        if name != "digests.json":
            torn.write_bytes(name, committed.read_bytes(name))


@pytest.mark.slow
def test_a_run_on_s3_resumes_on_another_node_like_a_straight_local_run(built, tiny_config, s3, tmp_path):
    home, _ = built
    straight = train(tiny_config("local", checkpoint={"every": 2}), home, TrainRequest(steps=4, run="straight"))
    remote = {"url": "s3://runs/team", "storage_options": s3.storage_options}
    config = tiny_config("remote", checkpoint={"every": 2, "keep": 1}, run=remote)
    first = train(config, home, TrainRequest(steps=2, run="moved"))
    assert not (first.run_dir / "checkpoints").exists()  # checkpoints go to the bucket only
    checkpoints = RemoteDir("s3://runs/team/moved/checkpoints", s3.storage_options)
    tear(checkpoints, 4)
    assert [step for step, _ in list_checkpoints(checkpoints)] == [2]  # the torn one is never listed

    node = other_node(home, tmp_path)
    second = train(config, node, TrainRequest(steps=4, run="moved", resume=True))
    assert second.start_step == 2
    assert first.losses + second.losses == pytest.approx(straight.losses, abs=1e-6)
    local, resumed = read_metrics(straight.run_dir), read_metrics(node.run("moved"))  # steps 1-2 came from S3
    assert [r.step for r in resumed] == list(range(1, 5))
    for key in ("loss", "grad_norm"):
        assert [getattr(r, key) for r in resumed] == pytest.approx([getattr(r, key) for r in local], abs=1e-6), key

    assert [step for step, _ in list_checkpoints(checkpoints)] == [4]  # rewritten whole; keep = 1 pruned step 2
    run = RemoteDir("s3://runs/team/moved", s3.storage_options)
    assert {"run.json", "metrics.jsonl"} <= set(run.files()) and "writer.lock" not in run.files()
    assert len(read_record(run, "metrics.jsonl").splitlines()) == 4  # the object and its appended parts


def test_appended_records_go_up_as_their_new_tails_and_come_back_whole(tmp_path):
    """Each push sends a `.jsonl` record's new tail only (the bytes written to the URL grow with the new lines,
    not the file); a pull joins the parts; a file cut back (a resume) goes up whole and its parts go."""
    from trainer.run_url import PARTS, pull_records, push_records

    run, remote = tmp_path / "run", RemoteDir(f"file://{tmp_path}/bucket/run-a")
    run.mkdir()
    (tmp_path / "bucket" / "run-a").mkdir(parents=True)  # on a disk the run's folder is made by its first checkpoint
    metrics = run / "metrics.jsonl"
    lines = [f'{{"step": {i}, "loss": {1 / (i + 1):.6f}}}\n' for i in range(30)]
    metrics.write_text("".join(lines[:10]))
    (run / "run.json").write_text("{}")
    push_records(run, remote)
    stored = tmp_path / "bucket" / "run-a"
    assert (stored / "metrics.jsonl").read_text() == "".join(lines[:10])
    for upto in (20, 30):
        metrics.write_text("".join(lines[:upto]))
        push_records(run, remote)
    tails = sorted((stored / f"metrics.jsonl{PARTS}").iterdir())
    assert [p.read_text() for p in tails] == ["".join(lines[10:20]), "".join(lines[20:30])]
    assert (stored / "metrics.jsonl").read_text() == "".join(lines[:10])  # the first push's, never sent again
    back = tmp_path / "other-node"
    assert pull_records(remote, back) == 2
    assert (back / "metrics.jsonl").read_text() == "".join(lines)
    metrics.write_text("".join(lines[:15]))  # cut back to a checkpoint
    push_records(run, remote)
    assert not (stored / f"metrics.jsonl{PARTS}").exists()
    pull_records(remote, back)
    assert (back / "metrics.jsonl").read_text() == "".join(lines[:15])


def _lines(start: int, stop: int) -> str:
    return "".join(f'{{"step": {i}, "loss": {1 / (i + 1):.6f}}}\n' for i in range(start, stop))


def test_records_go_up_in_the_background_in_order_up_to_each_checkpoints_size(s3, tmp_path):
    """Each submit notes the records as they stand; the uploader's thread pushes the snapshots in order (three
    queued at once, one more than the queue holds); lines written after the last submit stay local."""
    from trainer.record_uploads import RecordUploads
    from trainer.run_url import PARTS

    run = tmp_path / "run"
    run.mkdir()
    metrics, evals = run / "metrics.jsonl", run / "eval.jsonl"
    metrics.write_text(_lines(0, 5))
    evals.write_text(_lines(0, 1))
    (run / "run.json").write_text('{"status": "running"}')
    remote = RemoteDir("s3://runs/background", s3.storage_options)
    with RecordUploads(run, remote) as uploads:
        uploads.submit()
        uploads.flush()  # the first push of a process sends each record whole
        for stop in (10, 15, 20):  # three checkpoints' worth, queued without waiting
            with open(metrics, "a") as handle:
                handle.write(_lines(stop - 5, stop))
            uploads.submit()
        with open(metrics, "a") as handle:
            handle.write(_lines(20, 22))  # after the last checkpoint: not part of any snapshot
        uploads.flush()
        assert read_record(remote, "metrics.jsonl").decode() == _lines(0, 20)
        parts = remote.fs.ls(f"{remote.path}/metrics.jsonl{PARTS}", detail=False, refresh=True)
        assert [int(p.rsplit("/", 1)[-1]) for p in sorted(parts)] == [len(_lines(0, n)) for n in (5, 10, 15)]
        (run / "run.json").write_text('{"status": "completed"}')
        uploads.submit()
    assert read_record(remote, "metrics.jsonl").decode() == _lines(0, 22)  # closed: flushed and joined
    assert read_record(remote, "run.json") == b'{"status": "completed"}'
    assert read_record(remote, "eval.jsonl").decode() == _lines(0, 1)


def test_a_failed_upload_is_one_line_at_the_next_flush_never_dropped(s3, tmp_path):
    from millrace.errors import ArtifactError
    from trainer.record_uploads import RecordUploads

    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text(_lines(0, 3))
    uploads = RecordUploads(run, RemoteDir("s3://no-such-bucket/r", s3.storage_options))
    uploads.submit()
    with pytest.raises(ArtifactError) as caught:
        uploads.flush()
    message = str(caught.value)
    assert "\n" not in message and message.startswith("run records to s3://no-such-bucket/r: ")
    assert "no such bucket" in message
    with pytest.raises(ArtifactError):  # still there at the end of the run: the thread is joined, the error kept
        uploads.close()
    assert not uploads._thread.is_alive()


def test_a_kill_before_the_last_tail_went_up_resumes_to_the_same_records(s3, tmp_path):
    """A kill after a checkpoint, before its records' tail reached the URL: a resume on the same node keeps the
    longer local file and its next push sends it whole, so the URL's joined file is the straight run's again; a
    node that never saw the run gets what the URL holds."""
    from trainer import run_url
    from trainer.record_uploads import RecordUploads
    from trainer.run_url import pull_records

    run = tmp_path / "run"
    run.mkdir()
    metrics = run / "metrics.jsonl"
    metrics.write_text(_lines(0, 10))
    remote = RemoteDir("s3://runs/killed", s3.storage_options)
    with RecordUploads(run, remote) as uploads:
        uploads.submit()
    with open(metrics, "a") as handle:  # the next checkpoint's lines; the process dies before they go up
        handle.write(_lines(10, 20))
    run_url._pushed.clear()  # a new process, resuming
    assert pull_records(remote, run, keep_longer=True) == 1
    assert metrics.read_text() == _lines(0, 20)  # kept: it holds the URL's bytes and more
    stranger = tmp_path / "other-node"
    pull_records(remote, stranger)
    assert (stranger / "metrics.jsonl").read_text() == _lines(0, 10)
    with RecordUploads(run, remote) as uploads:
        uploads.submit()
    assert read_record(remote, "metrics.jsonl").decode() == _lines(0, 20)
    pull_records(remote, stranger)
    assert (stranger / "metrics.jsonl").read_text() == _lines(0, 20)


def test_a_run_resumed_in_the_same_process_goes_up_as_the_file_it_is(tmp_path):
    """A long-lived process (a fleet worker, a notebook) trains a run, then resumes it: the resume cut the
    records back to the checkpoint and wrote the later steps again (other timings: other lengths). The URL then
    holds the local file, not the first invocation's bytes up to their old size with the new file's after."""
    from trainer.record_uploads import RecordUploads

    def timed(start: int, stop: int, seconds: str) -> str:
        return "".join(f'{{"step": {i}, "step_seconds": {seconds}}}\n' for i in range(start, stop))

    run, remote = tmp_path / "run", RemoteDir(f"file://{tmp_path}/bucket/run-a")
    run.mkdir()
    (tmp_path / "bucket" / "run-a").mkdir(parents=True)
    metrics = run / "metrics.jsonl"
    metrics.write_text(timed(0, 10, "0.5"))
    with RecordUploads(run, remote) as uploads:
        uploads.submit()
        with open(metrics, "a") as handle:
            handle.write(timed(10, 20, "0.5"))
        uploads.submit()
    for seconds in ("0.25", "0.125", "0.5"):  # longer than the URL's bytes, then shorter, then as long
        metrics.write_text(timed(0, 15, "0.5") + timed(15, 20, seconds))  # cut back to step 15, trained again
        with RecordUploads(run, remote) as uploads:
            uploads.submit()
        assert read_record(remote, "metrics.jsonl") == metrics.read_bytes(), seconds


def test_a_branch_leaves_its_sources_records_on_this_node_as_they_are(built, tiny_config, tmp_path):
    """`--from-run SRC` on a node that holds SRC's records: the branch reads them there. The URL's copy is older
    while SRC still trains (its records go up after each checkpoint), so copying it over them would drop the
    lines SRC wrote since."""
    home, _ = built
    config = tiny_config("url", checkpoint={"every": 2}, run={"url": f"file://{tmp_path}/bucket"})
    (tmp_path / "bucket").mkdir()
    source = train(config, home, TrainRequest(steps=2, run="source-live")).run_dir
    metrics = source / "metrics.jsonl"
    with open(metrics, "a") as handle:  # step 3, logged by the live source after its last push
        handle.write(metrics.read_text().splitlines(keepends=True)[-1].replace('"step":2,', '"step":3,', 1))
    written = metrics.read_bytes()
    branch = train(config, home, TrainRequest(steps=3, run="branch-of-live", from_run="source-live"))
    assert metrics.read_bytes() == written and branch.start_step == 2
