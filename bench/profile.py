"""Sampling profiles of the gunicorn workers during a run, taken with py-spy, and their summary.

py-spy (`pip install py-spy`; not a project dependency) samples each worker
from outside, without changing the code it profiles. Only samples taken while
the worker holds the GIL count (`--gil`): waiting for a connection or for
PostgreSQL releases it, and on a saturated machine py-spy's own idle detection
takes a runnable-but-waiting worker for a busy one. Shares are therefore of the
workers' Python CPU time. Its output is folded stacks, one `frame;frame;... count`
per line, as flamegraph tools read them.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

_LINE_NUMBER = re.compile(r":\d+\)$")


def py_spy_path() -> str:
    found = shutil.which("py-spy") or shutil.which("py-spy", path=str(Path(sys.executable).parent))
    if found is None:
        raise SystemExit("--profile needs py-spy: `pip install py-spy` into .venv or put it on PATH")
    return found


def profilers_start(*, pids: Iterable[int], seconds: float, directory: Path, name: str) -> list[subprocess.Popen]:
    """One py-spy per worker for `seconds`, each writing `<directory>/<name>-<pid>.folded`."""
    directory.mkdir(parents=True, exist_ok=True)
    for stale in directory.glob(f"{name}-*.folded"):
        stale.unlink()
    command = [py_spy_path(), "record", "--format", "raw", "--rate", "200", "--nonblocking", "--gil"]
    command += ["--duration", str(max(1, round(seconds)))]
    return [
        subprocess.Popen(
            [*command, "--pid", str(pid), "--output", str(directory / f"{name}-{pid}.folded")],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for pid in pids
    ]


def _frame_name(frame: str) -> str:
    """`view (assignments/api.py:23)` -> `view (assignments/api.py)`: one name per function."""
    return _LINE_NUMBER.sub(")", frame.replace(str(Path(sys.prefix)), "").strip())


def profile_summary(paths: Iterable[Path], *, top: int = 40, trunk: float = 0.95) -> str:
    """The functions holding most samples, inclusive (on the stack) and self (at its top).

    Frames on the stack in at least `trunk` of the samples the busiest frame is
    in (gunicorn's loop, the start of every request) are left out of the
    inclusive list: they say nothing.
    """
    inclusive: Counter[str] = Counter()
    own: Counter[str] = Counter()
    total = 0
    for path in paths:
        for line in path.read_text().splitlines():
            stack, _, count_text = line.rpartition(" ")
            if not stack:
                continue
            count = int(count_text)
            frames = [_frame_name(frame) for frame in stack.split(";")]
            total += count
            own[frames[-1]] += count
            for frame in set(frames):
                inclusive[frame] += count
    if not total:
        return "no samples"
    lines = [f"{total} samples", "", "inclusive  function"]
    busiest = inclusive.most_common(1)[0][1]
    branches = [(frame, count) for frame, count in inclusive.most_common() if count < trunk * busiest]
    lines += [f"{count / total:8.1%}   {frame}" for frame, count in branches[:top]]
    lines += ["", "self       function"]
    lines += [f"{count / total:8.1%}   {frame}" for frame, count in own.most_common(top)]
    return "\n".join(lines)
