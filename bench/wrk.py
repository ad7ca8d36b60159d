"""The native load generator: wrk drives an HTTP target, `--load wrk` of the hot-path benchmarks.

The Python load workers (load.py) cost several times the CPU per request that a
native generator does, on the same two cores as the servers; that CPU is taken
from both HTTP targets alike and so narrows the gap between them. wrk (Debian's
package, which bench/run installs) makes each request in LuaJIT from a script
written here for the scenario, over keep-alive connections, and its own CPU is
measured and reported as the client's.

A run is two wrk processes: a warm-up, then the measured one, around which the
CPU windows are taken; wrk's own duration and request count give the throughput.
wrk checks status codes only (any answer but 2xx or 3xx is an error); the Python
load of the same scenarios checks every answer's body.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path

from bench.cpu import CpuWindow
from bench.load import LoadResult
from bench.scenarios import Scenario

# Each wrk thread numbers its connections' requests with its own counter; IDs are
# <prefix>-<thread>-<counter * new + i>, so they are new in the database whatever
# ran before (the prefix names the run) and the same shape as the Python load's.
# Existing subjects are drawn from the first `seeded` seeded ones (for the scenarios
# of subjects stored in more experiments, the first Scenario.existing_among).
# An OpenFeature evaluation sends the subject as context.targetingKey (kind "ofrep",
# the experiment in the path; "ofrep-bulk", with subjectType user).
LUA = r"""
local kind, path, token, experiment, prefix = %(kind)s, %(path)s, %(token)s, %(experiment)s, %(prefix)s
local new, existing, seeded = %(new)d, %(existing)d, %(seeded)d
local experiments = %(experiments)s
local next_thread = 0

function setup(thread)
    thread:set("thread_number", next_thread)
    next_thread = next_thread + 1
end

-- Each thread draws its own sample of the seeded subjects, as each Python load worker does.
function init(args)
    math.randomseed(1000 + thread_number)
end

local counter = 0
local headers = {["Authorization"] = "Bearer " .. token, ["Content-Type"] = "application/json"}

local function new_ids()
    local ids = {}
    for i = 1, new do
        ids[#ids + 1] = string.format("%%s-%%d-%%010d", prefix, thread_number, counter * new + i)
    end
    counter = counter + 1
    for i = 1, existing do
        ids[#ids + 1] = string.format("seed-%%08d", math.random(0, seeded - 1))
    end
    return ids
end

local function quoted(ids)
    return '"' .. table.concat(ids, '","') .. '"'
end

function request()
    if kind == "healthz" then
        return wrk.format("GET", path)
    end
    local ids = new_ids()
    local body
    if kind == "assign" then
        body = '{"experiment_id":"' .. experiment .. '","subject_ids":[' .. quoted(ids) .. ']}'
    elseif kind == "subject" then
        body = '{"subject":{"user":"' .. ids[1] .. '"},"experiments":[' .. experiments .. '],"assign":true}'
    elseif kind == "ofrep" then
        body = '{"context":{"targetingKey":"' .. ids[1] .. '"}}'
    elseif kind == "ofrep-bulk" then
        body = '{"context":{"targetingKey":"' .. ids[1] .. '","subjectType":"user"}}'
    else
        body = '{"identifiers":[{"subject_type":"user","subject_id":"' .. ids[1]
            .. '"},{"subject_type":"cookie","subject_id":"' .. ids[1] .. '"}]}'
    end
    return wrk.format("POST", path, headers, body)
end

function done(summary, latency, requests)
    local e = summary.errors
    io.write(string.format(
        '{"requests":%%d,"duration_us":%%d,"connect":%%d,"read":%%d,"write":%%d,"status":%%d,"timeout":%%d,'
        .. '"p50_us":%%d,"p95_us":%%d,"p99_us":%%d,"max_us":%%d}\n',
        summary.requests, summary.duration, e.connect, e.read, e.write, e.status, e.timeout,
        latency:percentile(50), latency:percentile(95), latency:percentile(99), latency.max))
end
"""


class WrkUnavailable(RuntimeError):
    pass


def wrk_path() -> str:
    path = shutil.which("wrk")
    if path is None:
        raise WrkUnavailable("--load wrk needs wrk on PATH: bench/run installs Debian's package (apt-get install wrk)")
    return path


def supported(scenario: Scenario) -> bool:
    """Whether wrk can make the scenario's requests: not those sending attributes or pooled subjects, which the
    Python load builds and checks."""
    return not (scenario.attributes or scenario.linked_every or scenario.members)


def _lua_string(value: str) -> str:
    return json.dumps(value)


def script(*, scenario: Scenario, token: str, prefix: str, seeded: int) -> str:
    return LUA % {
        "kind": _lua_string(scenario.kind),
        "path": _lua_string(scenario.path),
        "token": _lua_string(token),
        "experiment": _lua_string(scenario.experiment_id),
        "prefix": _lua_string(prefix),
        "new": scenario.new,
        "existing": scenario.existing,
        "seeded": scenario.existing_pool(seeded),
        "experiments": _lua_string(",".join(json.dumps(key) for key in scenario.experiments)),
    }


def _wrk(url: str, lua: Path, *, concurrency: int, seconds: float) -> subprocess.Popen:
    threads = min(2, concurrency)
    return subprocess.Popen(
        [
            wrk_path(),
            f"--threads={threads}",
            f"--connections={concurrency}",
            f"--duration={max(1, round(seconds))}s",
            "--timeout=30s",
            f"--script={lua}",
            url,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _summary(process: subprocess.Popen) -> dict:
    stdout, stderr = process.communicate(timeout=120)
    if process.returncode != 0:
        raise RuntimeError(f"wrk exited with {process.returncode}: {stderr.strip()[:500]}")
    lines = [line for line in stdout.splitlines() if line.startswith("{")]
    if not lines:
        raise RuntimeError(f"wrk printed no summary: {stdout.strip()[:500]}")
    return json.loads(lines[-1])


def wrk_run(
    *,
    url: str,
    scenario: Scenario,
    token: str,
    prefix: str,
    seeded: int,
    concurrency: int,
    warmup: float,
    duration: float,
    on_start: Callable[[], None],
    on_end: Callable[[], None],
) -> LoadResult:
    """A warm-up wrk, then the measured one between on_start and on_end: what it measured, in load.py's terms,
    with the measured wrk process's CPU as the client's."""
    if not supported(scenario):
        raise ValueError(f"wrk cannot make the requests of scenario {scenario.key} (attributes or pooled IDs)")
    with tempfile.TemporaryDirectory(prefix="bench-wrk-") as directory:
        warm_lua, lua = Path(directory) / "warm.lua", Path(directory) / "run.lua"
        warm_lua.write_text(script(scenario=scenario, token=token, prefix=f"{prefix}-w", seeded=seeded))
        lua.write_text(script(scenario=scenario, token=token, prefix=prefix, seeded=seeded))
        warm = _summary(_wrk(url, warm_lua, concurrency=concurrency, seconds=warmup)) if warmup > 0 else {}
        process = _wrk(url, lua, concurrency=concurrency, seconds=duration)
        # wait() reaps wrk before the window ends: its time is then read from this process's reaped children.
        client = CpuWindow(lambda: [process.pid], parent=os.getpid())
        client.start()
        on_start()
        try:
            process.wait(timeout=duration + 120)
        finally:
            on_end()
            client.end()
        summary = _summary(process)
    errors = sum(summary[kind] for kind in ("connect", "read", "write", "status", "timeout"))
    requests = summary["requests"]
    return LoadResult(
        duration=summary["duration_us"] / 1e6,
        # Warm-up included, as load.py counts it: it divides the server's transaction count.
        sent=warm.get("requests", 0) + requests,
        requests=requests - errors,
        subjects=(requests - errors) * scenario.subjects,
        errors=errors,
        first_error=None if not errors else f"wrk counted errors: {json.dumps(summary)}",
        client_cpu_seconds=client.processes or 0.0,
        latencies=[summary["max_us"] / 1e6],
        percentiles={share: summary[f"p{round(share * 100)}_us"] / 1e6 for share in (0.50, 0.95, 0.99)},
    )
