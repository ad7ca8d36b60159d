import pytest


@pytest.fixture(autouse=True)
def _fast_password_hashing(settings):
    """These tests sign in dozens of times; PBKDF2's deliberate slowness is not what they test."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
