"""config/env.py's reader of web origins (OFREP_CORS_ALLOWED_ORIGINS): origins as browsers send them, else start-up
stops naming the variable."""

from __future__ import annotations

import pytest
from django.core.exceptions import ImproperlyConfigured

from config.env import env_origins
from tests.helpers.processes import manage_run

NAME = "OFREP_CORS_ALLOWED_ORIGINS"


@pytest.mark.parametrize("raw", [None, "", "  "])
def test_env_origins__unset_or_blank__none(monkeypatch, raw):
    if raw is None:
        monkeypatch.delenv(NAME, raising=False)
    else:
        monkeypatch.setenv(NAME, raw)

    assert env_origins(NAME) == frozenset()


def test_env_origins__a_list__each_in_lower_case(monkeypatch):
    monkeypatch.setenv(NAME, "https://App.Example.com, http://localhost:3000,https://[::1]:8443")

    assert env_origins(NAME) == {"https://app.example.com", "http://localhost:3000", "https://[::1]:8443"}


@pytest.mark.parametrize(
    "origin",
    [
        "app.example.com",
        "*",
        "ftp://app.example.com",
        "https://app.example.com/",
        "https://app.example.com/path",
        "https://app.example.com?x=1",
        "https://user@app.example.com",
        "https://app.example.com:port",
        "https://app.example.com:0",
        "https://",
    ],
)
def test_env_origins__not_an_origin__refused_naming_the_variable_and_the_item(monkeypatch, origin):
    monkeypatch.setenv(NAME, f"https://ok.example.com,{origin}")

    with pytest.raises(ImproperlyConfigured, match=f"^{NAME} must list origins") as refused:
        env_origins(NAME)
    assert repr(origin) in str(refused.value)


def test_env_origins__an_empty_item__refused(monkeypatch):
    monkeypatch.setenv(NAME, "https://a.example.com,,https://b.example.com")

    with pytest.raises(ImproperlyConfigured, match=f"^{NAME} must be a comma-separated list"):
        env_origins(NAME)


def test_start_up__malformed_origin__stops_with_the_variables_name():
    # Settings are read before any database is opened: the embedded default will do.
    result = manage_run("check", env={"DATABASE_URL": "", "SECRET_KEY": "x", NAME: "app.example.com"})

    assert result.returncode != 0
    assert f"{NAME} must list origins such as https://app.example.com" in result.stderr
