"""The machine a benchmark ran on, as Linux describes it: numbers mean little without it."""

from __future__ import annotations

import os
import platform
from pathlib import Path


def _proc_value(path: str, key: str) -> str | None:
    try:
        lines = Path(path).read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        name, _, value = line.partition(":")
        if name.strip() == key:
            return value.strip()
    return None


def _os_name() -> str:
    try:
        lines = Path("/etc/os-release").read_text().splitlines()
    except OSError:
        return platform.system()
    names = dict(line.split("=", 1) for line in lines if "=" in line)
    return names.get("PRETTY_NAME", platform.system()).strip('"')


def machine() -> dict[str, str | int | None]:
    memory_kib = _proc_value("/proc/meminfo", "MemTotal")
    return {
        "cpu_model": _proc_value("/proc/cpuinfo", "model name"),
        "cores": os.cpu_count(),
        "memory_gib": None if memory_kib is None else round(int(memory_kib.split()[0]) / 1024**2, 1),
        "os": f"{_os_name()}, Linux {platform.release()}",
    }
