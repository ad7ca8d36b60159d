"""deploy/proxy/render on its own: settings it must refuse are refused before any nginx.conf is written.
tests/e2e/test_proxy.py runs the rendered configuration through real nginx."""

from __future__ import annotations

import os
import subprocess

from tests.helpers import PROJECT_DIR


def test_render__metrics_among_the_public_paths__refused(tmp_path):
    output = tmp_path / "nginx.conf"
    render = subprocess.run(
        [str(PROJECT_DIR / "deploy/proxy/render"), str(output)],
        env={**os.environ, "PROXY_API_TOKEN": "abc.def", "PROXY_PUBLIC_PATHS": "/experiment-assignments /metrics"},
        capture_output=True,
        text=True,
    )

    assert render.returncode == 1
    assert "PROXY_PUBLIC_PATHS must not name /metrics" in render.stderr
    assert not output.exists()


def test_render__malformed_setting__refused_naming_the_variable(tmp_path):
    output = tmp_path / "nginx.conf"
    render = subprocess.run(
        [str(PROJECT_DIR / "deploy/proxy/render"), str(output)],
        env={**os.environ, "PROXY_API_TOKEN": "abc.def", "PROXY_LISTEN": "8080; include /etc/passwd"},
        capture_output=True,
        text=True,
    )

    assert render.returncode == 1
    assert "PROXY_LISTEN must be" in render.stderr
    assert not output.exists()
