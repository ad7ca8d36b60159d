"""Progress of long commands on a terminal: a bar on stderr when it is a TTY, nothing otherwise.

tqdm draws the bar (rate, elapsed and remaining time); a disabled tqdm is a no-op,
so the commands call the same `update` whether anyone is watching or not, and a
pipe or a log file never receives carriage returns.
"""

from __future__ import annotations

import sys
from collections.abc import Generator, Iterator
from typing import TextIO, TypeVar

from tqdm import tqdm

T = TypeVar("T")


def progress_bar(*, total: int | None, unit: str, description: str, stream: TextIO | None = None) -> tqdm:
    stream = stream or sys.stderr
    return tqdm(
        total=total,
        unit=unit,
        desc=description,
        file=stream,
        disable=not stream.isatty(),
        unit_scale=True,
        dynamic_ncols=True,
        leave=False,
    )


def counted(items: Iterator[T], bar: tqdm) -> Generator[T]:
    """The items, advancing the bar by one per item; closing it closes `items` too."""
    try:
        if bar.disable:
            yield from items
            return
        for item in items:
            bar.update(1)
            yield item
    finally:
        close = getattr(items, "close", None)
        if close is not None:
            close()
