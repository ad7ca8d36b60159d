"""deploy/proxy/render on its own: settings it must refuse are refused before any nginx.conf is written, and the
locations each setting exposes. tests/e2e/test_proxy.py runs the rendered configuration through real nginx."""

from __future__ import annotations

import os
import re
import subprocess

import pytest

from tests.helpers import PROJECT_DIR

RENDER = str(PROJECT_DIR / "deploy/proxy/render")
BULK = "/ofrep/v1/evaluate/flags"
# A regex location's pattern, quoted as nginx needs it for the braces of {0,99}.
REGEX_LOCATION = re.compile(
    r'^\s*location ~ "(?P<pattern>[^"]+)" \{ proxy_pass http://service\$uri\$is_args\$args; \}$', re.M
)


def rendered(**settings: str) -> str:
    """The configuration render prints for these PROXY_* settings (on top of a token)."""
    render = subprocess.run(
        [RENDER], env={**os.environ, "PROXY_API_TOKEN": "abc.def", **settings}, capture_output=True, text=True
    )
    assert render.returncode == 0, render.stderr
    return render.stdout


def exact_locations(config: str) -> list[str]:
    return re.findall(r"^\s*location = (\S+) \{ proxy_pass http://service\$uri\$is_args\$args; \}$", config, re.M)


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ({"PROXY_PUBLIC_PATHS": "/experiment-assignments /metrics"}, "PROXY_PUBLIC_PATHS must not name /metrics"),
        ({"PROXY_LISTEN": "8080; include /etc/passwd"}, "PROXY_LISTEN must be"),
        ({"PROXY_ENABLE_OFREP": "maybe"}, "PROXY_ENABLE_OFREP must be true or false, got 'maybe'"),
        ({"PROXY_ENABLE_ID_LINK": "yes please"}, "PROXY_ENABLE_ID_LINK must be true or false, got 'yes please'"),
    ],
    ids=["metrics-among-the-public-paths", "malformed-setting", "ofrep-switch-not-a-boolean", "id-link-not-a-boolean"],
)
def test_render__setting_it_must_refuse__refused_naming_the_variable_and_nothing_written(tmp_path, setting, message):
    output = tmp_path / "nginx.conf"
    render = subprocess.run(
        [RENDER, str(output)],
        env={**os.environ, "PROXY_API_TOKEN": "abc.def", **setting},
        capture_output=True,
        text=True,
    )

    assert render.returncode == 1
    assert message in render.stderr
    assert not output.exists()


def test_render__no_token__refused_naming_both_roles_it_may_have():
    env = {name: value for name, value in os.environ.items() if not name.startswith("PROXY_API_TOKEN")}
    render = subprocess.run([RENDER], env=env, capture_output=True, text=True)

    assert render.returncode == 1
    assert "create_api_token --name proxy" in render.stderr
    assert "--role client" in render.stderr


@pytest.mark.parametrize("switch", [None, "false", "off"])
def test_render__ofrep_off__no_ofrep_location(switch):
    config = rendered(**({} if switch is None else {"PROXY_ENABLE_OFREP": switch}))

    assert "ofrep" not in config
    assert exact_locations(config) == ["/experiment-assignments", "/experiment-assignments/", "/healthz", "/healthz/"]
    assert not REGEX_LOCATION.search(config)


@pytest.mark.parametrize("switch", ["true", "1", "on"])
def test_render__ofrep_on__bulk_exact_and_one_key_segment_by_regex(switch):
    config = rendered(PROXY_ENABLE_OFREP=switch, PROXY_PUBLIC_PATHS="/healthz")

    assert exact_locations(config) == ["/healthz", "/healthz/", BULK, f"{BULK}/"]
    [pattern] = REGEX_LOCATION.findall(config)
    # The location's regex as nginx (PCRE) reads it; this one means the same to Python's re.
    for path in (f"{BULK}/checkout-button", f"{BULK}/checkout-button/", f"{BULK}/A.b_c-9", f"{BULK}/{'k' * 100}"):
        assert re.search(pattern, path), path
    for path in (
        f"{BULK}/",
        f"{BULK}//",
        f"{BULK}/a/b",
        f"{BULK}/a//",
        f"{BULK}/-a",
        f"{BULK}/a b",
        f"{BULK}/{'k' * 101}",
        f"/x{BULK}/a",
        f"{BULK}/a/evaluate",
    ):
        assert not re.search(pattern, path), path


def test_render__ofrep_on_with_the_bulk_path_also_listed__each_location_once():
    config = rendered(PROXY_ENABLE_OFREP="true", PROXY_PUBLIC_PATHS=f"/healthz {BULK}")

    assert exact_locations(config) == ["/healthz", "/healthz/", BULK, f"{BULK}/"]
    assert len(REGEX_LOCATION.findall(config)) == 1
