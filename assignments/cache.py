"""This app's per-process caches, under the policy of core/cache.py."""

from __future__ import annotations

from typing import TYPE_CHECKING

from core.cache import ProcessCache, TimeToLive, Versioned

if TYPE_CHECKING:
    from assignments.models import SubjectType
    from assignments.selectors import ExperimentCatalog, ExperimentState

MAX_CACHED_EXPERIMENTS = 10_000
MAX_CACHED_SUBJECT_TYPES = 10_000
# How long a process trusts its subject types: one archived elsewhere is refused within this time.
SUBJECT_TYPE_CACHE_SECONDS = 5.0
# The catalog is one value, held under this key.
CATALOG = "catalog"

# ExperimentState by lower-cased experiment ID, for POST /experiment-assignments. The
# hot path compares each one's version with the stored one in a statement it runs anyway.
experiment_states: ProcessCache[str, ExperimentState] = ProcessCache(
    max_entries=MAX_CACHED_EXPERIMENTS, policy=Versioned()
)
# Every experiment's state, for POST /assignments, which names many experiments or none;
# checked against experiment_catalog_version in the statement that reads the assignments.
experiment_catalog: ProcessCache[str, ExperimentCatalog] = ProcessCache(max_entries=1, policy=Versioned())
# Every subject type by lower-cased ID, loaded whole (a handful of rows), so a link costs no lookup of its types.
subject_types: ProcessCache[str, SubjectType] = ProcessCache(
    max_entries=MAX_CACHED_SUBJECT_TYPES, policy=TimeToLive(lambda: SUBJECT_TYPE_CACHE_SECONDS)
)
