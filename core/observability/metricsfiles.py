"""PROMETHEUS_MULTIPROC_DIR, where each gunicorn worker writes its counts (core/observability/metrics.py): made for the
server unless given, emptied when the server starts, and kept from growing with every recycled worker.

gunicorn replaces a worker every GUNICORN_MAX_REQUESTS requests. prometheus_client
keeps a stopped worker's files, so that the totals it counted stay in the sum, and a
scrape reads every file: at a few hundred requests a second that is thousands of
files a day and a scrape that slows down with them. So when a worker stops, its
counter and histogram files are added into one folded file per kind and removed,
and its gauges (the `live` modes) are dropped, as prometheus_client's
mark_process_dead does. A scrape and a fold exclude each other (a lock file in the
directory): a scrape in the middle of one would count the worker twice, or not at all.

prometheus_client chooses where it keeps counts when it is first imported: in the
directory if PROMETHEUS_MULTIPROC_DIR is set then, in the process otherwise. So this
module imports it only inside the functions that gunicorn calls once the variable is
set, and deploy/gunicorn.conf.py sets it before the application is loaded.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

LOCK_FILE = "scrape.lock"
# A stopped worker's files (<kind>_<pid>.db) are added into these; the collector reads the kind from the
# name's first part, as for any worker's file.
FOLDED_KINDS = ("counter", "histogram")


def metrics_directory() -> Path | None:
    """The multi-process directory this process counts into, or None when it counts in memory."""
    value = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    return Path(value) if value else None


def metrics_directory_prepare() -> Path:
    """The directory named by PROMETHEUS_MULTIPROC_DIR, created if missing; without the variable, a new one
    for this server (under /dev/shm where there is one), set in the variable and removed when the process
    that made it exits."""
    directory = metrics_directory()
    if directory is not None:
        directory.mkdir(parents=True, exist_ok=True)
        return directory
    # In memory where the system has it: a page of a file on disk that the kernel is writing back can
    # stall the worker that counts into it, as gunicorn says of its own heartbeat file (worker_tmp_dir).
    # mkdtemp makes a directory only this user can enter, with a name no one can guess.
    shared_memory = "/dev/shm" if os.path.isdir("/dev/shm") else None  # noqa: S108
    directory = Path(tempfile.mkdtemp(prefix="service-metrics-", dir=shared_memory))
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = str(directory)
    owner = os.getpid()

    def remove() -> None:
        # gunicorn's workers exit through sys.exit as well, and inherit this hook from the master.
        if os.getpid() == owner:
            shutil.rmtree(directory, ignore_errors=True)

    atexit.register(remove)
    return directory


def metrics_directory_clean(directory: Path) -> None:
    """Forget every count of an earlier server that used the directory: a new server starts from zero."""
    with directory_locked(directory, exclusive=True):
        for path in directory.glob("*.db"):
            path.unlink(missing_ok=True)


@contextlib.contextmanager
def directory_locked(directory: Path, *, exclusive: bool) -> Iterator[None]:
    """Held by a scrape (shared) and by a fold or a clean (exclusive); released when the file is closed."""
    with open(directory / LOCK_FILE, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        yield


def worker_files_fold(directory: Path, pid: int) -> None:
    """After a worker stopped: its live gauges dropped, its counters and histograms added into the folded
    files and its own files removed, so that the totals stay the same in one file fewer."""
    from prometheus_client import multiprocess
    from prometheus_client.mmap_dict import MmapedDict

    multiprocess.mark_process_dead(pid, str(directory))
    with directory_locked(directory, exclusive=True):
        for kind in FOLDED_KINDS:
            source = directory / f"{kind}_{pid}.db"
            if not source.exists():
                continue
            folded = MmapedDict(str(directory / f"{kind}_folded.db"))
            try:
                # Histogram files hold each bucket's own count (not cumulative), so bucket adds to bucket.
                for key, value, _, _ in MmapedDict.read_all_values_from_file(str(source)):
                    total, _ = folded.read_value(key)
                    folded.write_value(key, total + value, 0.0)
            finally:
                folded.close()
            source.unlink()
