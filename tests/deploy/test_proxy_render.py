"""deploy/proxy/render on its own: settings it must refuse are refused before any nginx.conf is written.
tests/e2e/test_proxy.py runs the rendered configuration through real nginx."""

from __future__ import annotations

import os
import subprocess

import pytest

from tests.helpers import PROJECT_DIR


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ({"PROXY_PUBLIC_PATHS": "/experiment-assignments /metrics"}, "PROXY_PUBLIC_PATHS must not name /metrics"),
        ({"PROXY_LISTEN": "8080; include /etc/passwd"}, "PROXY_LISTEN must be"),
    ],
    ids=["metrics-among-the-public-paths", "malformed-setting"],
)
def test_render__setting_it_must_refuse__refused_naming_the_variable_and_nothing_written(tmp_path, setting, message):
    output = tmp_path / "nginx.conf"
    render = subprocess.run(
        [str(PROJECT_DIR / "deploy/proxy/render"), str(output)],
        env={**os.environ, "PROXY_API_TOKEN": "abc.def", **setting},
        capture_output=True,
        text=True,
    )

    assert render.returncode == 1
    assert message in render.stderr
    assert not output.exists()
