import pytest

from tokens.cache import api_tokens


@pytest.fixture(autouse=True)
def _fresh_token_cache():
    """Each test verifies tokens against the database, not against a copy cached by an earlier test."""
    api_tokens.clear()
    yield
    api_tokens.clear()
