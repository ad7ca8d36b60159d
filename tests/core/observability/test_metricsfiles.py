"""core/observability/metricsfiles.py on real files: a stopped worker's counts folded without changing any total, a new
server's directory emptied, a directory made when none is named."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from prometheus_client.mmap_dict import MmapedDict, mmap_key
from prometheus_client.multiprocess import MultiProcessCollector

from core.observability.metricsfiles import metrics_directory_clean, worker_files_fold
from tests.helpers import PROJECT_DIR
from tests.helpers.observability import sample


def write(path: Path, name: str, sample_name: str, labels: dict[str, str], value: float) -> None:
    values = MmapedDict(str(path))
    values.write_value(mmap_key(name, sample_name, list(labels), list(labels.values()), "help"), value, 0.0)
    values.close()


def worker_counted(directory: Path, pid: int, *, requests: float, fast: float, slow: float) -> None:
    """The files a worker leaves: a counter, a histogram's buckets (each its own count) and sum, a live gauge."""
    write(directory / f"counter_{pid}.db", "http_requests", "http_requests_total", {"status": "200"}, requests)
    for bound, count in (("0.1", fast), ("1.0", slow), ("+Inf", 0.0)):
        histogram = directory / f"histogram_{pid}.db"
        write(histogram, "latency_seconds", "latency_seconds_bucket", {"le": bound}, count)
    write(directory / f"histogram_{pid}.db", "latency_seconds", "latency_seconds_sum", {}, fast * 0.05 + slow * 0.5)
    write(directory / f"gauge_livemostrecent_{pid}.db", "up", "up", {}, 1.0)


def totals(directory: Path) -> dict:
    collected = MultiProcessCollector(None, path=str(directory)).collect()
    return {(s.name, frozenset(s.labels.items())): s.value for metric in collected for s in metric.samples}


def test_fold__two_stopped_workers__totals_unchanged_their_files_gone(tmp_path):
    # Given three workers' counts, two of which have stopped
    worker_counted(tmp_path, 101, requests=5, fast=4, slow=1)
    worker_counted(tmp_path, 102, requests=7, fast=6, slow=1)
    worker_counted(tmp_path, 103, requests=11, fast=10, slow=1)
    before = totals(tmp_path)

    # When the two are folded, one after the other
    worker_files_fold(tmp_path, 101)
    worker_files_fold(tmp_path, 102)

    # Then every counter and bucket adds up as before, in the folded files and the live worker's
    after = totals(tmp_path)
    assert {key: value for key, value in after.items() if key[0] != "up"} == {
        key: value for key, value in before.items() if key[0] != "up"
    }
    assert sample(after, "http_requests_total", status="200") == 23
    assert sample(after, "latency_seconds_bucket", le="1.0") == 23
    assert sample(after, "latency_seconds_count") == 23
    assert sorted(path.name for path in tmp_path.glob("*.db")) == [
        "counter_103.db",
        "counter_folded.db",
        "gauge_livemostrecent_103.db",
        "histogram_103.db",
        "histogram_folded.db",
    ]


def test_fold__worker_that_counted_nothing__nothing_to_fold(tmp_path):
    worker_counted(tmp_path, 103, requests=1, fast=1, slow=0)

    worker_files_fold(tmp_path, 104)

    assert not (tmp_path / "counter_folded.db").exists()
    assert sample(totals(tmp_path), "http_requests_total", status="200") == 1


def test_clean__counts_of_an_earlier_server__all_gone_other_files_kept(tmp_path):
    worker_counted(tmp_path, 101, requests=5, fast=4, slow=1)
    worker_files_fold(tmp_path, 101)
    (tmp_path / "notes.txt").write_text("kept")

    metrics_directory_clean(tmp_path)

    assert list(tmp_path.glob("*.db")) == []
    assert (tmp_path / "notes.txt").read_text() == "kept"


def test_prepare__no_directory_named__one_made_for_the_process_and_removed_when_it_exits():
    # Given a process that prepares the directory without PROMETHEUS_MULTIPROC_DIR, and forks a child that exits
    script = (
        "import os, sys\n"
        "from core.observability.metricsfiles import metrics_directory_prepare\n"
        "directory = metrics_directory_prepare()\n"
        "assert os.environ['PROMETHEUS_MULTIPROC_DIR'] == str(directory) and directory.is_dir()\n"
        "print(directory, flush=True)\n"
        "if os.fork() == 0:\n"
        "    sys.exit(0)\n"
        "os.wait()\n"
        "assert directory.is_dir(), 'a child exiting removed it'\n"
    )
    env = {key: value for key, value in os.environ.items() if key != "PROMETHEUS_MULTIPROC_DIR"}
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=PROJECT_DIR, env=env, capture_output=True, text=True, timeout=30
    )

    # Then it was there while the process ran, and is gone now that it has exited
    assert done.returncode == 0, done.stderr
    assert not Path(done.stdout.strip()).exists()


def test_prepare__directory_named__created_if_missing_and_kept(tmp_path):
    named = tmp_path / "deep" / "metrics"
    script = "from core.observability.metricsfiles import metrics_directory_prepare; print(metrics_directory_prepare())"
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=PROJECT_DIR,
        env={**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(named)},
        capture_output=True,
        text=True,
        timeout=30,
    )

    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(named)
    assert named.is_dir()
