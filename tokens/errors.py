"""Failures of token management that the commands and the admin report to a person."""

from __future__ import annotations


class ApiTokenError(Exception):
    """A token operation refused; the message says why, for a person to read."""


class ApiTokenInvalid(ApiTokenError):
    pass


class ApiTokenNameTaken(ApiTokenError):
    pass


class ApiTokenNotFound(ApiTokenError):
    pass
