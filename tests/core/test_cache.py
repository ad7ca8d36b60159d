"""The per-process cache policy: bounded, versioned or with a time to live, all cleared by one call."""

from __future__ import annotations

import threading
import time

from assignments.cache import experiment_catalog, experiment_states, subject_types
from core.cache import ProcessCache, TimeToLive, Versioned, caches_clear
from tokens.cache import api_tokens


def test_process_cache__full__emptied_before_the_next_new_key():
    # Given a cache holding as many entries as its bound
    cache = ProcessCache(max_entries=3, policy=Versioned())
    for key in "abc":
        cache.put(key, key.upper())

    # When a fourth key is stored
    cache.put("d", "D")

    # Then it holds only that one: never more than the bound
    assert len(cache) == 1
    assert [cache.get(key) for key in "abcd"] == [None, None, None, "D"]


def test_process_cache__full__a_key_it_holds_replaced_without_emptying():
    cache = ProcessCache(max_entries=2, policy=Versioned())
    cache.put("a", 1)
    cache.put("b", 2)

    cache.put("a", 3)

    assert (cache.get("a"), cache.get("b")) == (3, 2)


def test_versioned__entry__kept_until_forgotten():
    cache = ProcessCache(max_entries=10, policy=Versioned())
    cache.put("exp", 1)

    assert cache.get("exp") == 1
    cache.forget("exp")
    assert cache.get("exp") is None


def test_get_or_load__miss__loads_once_then_answers_from_the_cache():
    cache = ProcessCache(max_entries=10, policy=Versioned())
    loads = []

    def load():
        loads.append(1)
        return "state-v1"

    assert cache.get_or_load("exp", load) == "state-v1"
    assert cache.get_or_load("exp", load) == "state-v1"
    assert len(loads) == 1


def test_get_or_load__bypass_cache__loads_the_current_version():
    # Given a cached entry the reader found stale
    cache = ProcessCache(max_entries=10, policy=Versioned())
    cache.put("exp", "state-v1")

    # When it asks again bypassing the cache
    state = cache.get_or_load("exp", lambda: "state-v2", bypass_cache=True)

    # Then it gets, and from now on the cache holds, the new version
    assert state == "state-v2"
    assert cache.get("exp") == "state-v2"


def test_get_or_load__nothing_loaded__nothing_cached_and_a_stale_entry_forgotten():
    cache = ProcessCache(max_entries=10, policy=Versioned())
    cache.put("gone", "state-v1")

    assert cache.get_or_load("unknown", lambda: None) is None
    assert cache.get_or_load("gone", lambda: None, bypass_cache=True) is None
    assert len(cache) == 0


def test_time_to_live__entry__trusted_until_it_ages_out_on_the_real_clock():
    cache = ProcessCache(max_entries=10, policy=TimeToLive(lambda: 0.2))
    cache.put("token", "snapshot")

    assert cache.get("token") == "snapshot"
    time.sleep(0.25)
    assert cache.get("token") is None


def test_time_to_live__zero__never_answers_from_the_cache():
    cache = ProcessCache(max_entries=10, policy=TimeToLive(lambda: 0))
    cache.put("token", "snapshot")

    assert cache.get("token") is None


def test_time_to_live__seconds_changed__applies_to_the_next_entry_stored():
    seconds = {"value": 0.0}
    cache = ProcessCache(max_entries=10, policy=TimeToLive(lambda: seconds["value"]))
    cache.put("before", 1)

    seconds["value"] = 60.0
    cache.put("after", 2)

    assert (cache.get("before"), cache.get("after")) == (None, 2)


def test_put_unless__live_entry_kept__not_stored():
    cache = ProcessCache(max_entries=10, policy=Versioned())
    cache.put("digest", 10)

    assert cache.put_unless("digest", 5, keep=lambda known: known >= 5) is False
    assert cache.put_unless("digest", 20, keep=lambda known: known >= 20) is True
    assert cache.get("digest") == 20


def test_put_unless__expired_entry__stored_whatever_keep_says():
    cache = ProcessCache(max_entries=10, policy=TimeToLive(lambda: 0.05))
    cache.put("digest", 10)
    time.sleep(0.1)

    assert cache.put_unless("digest", 5, keep=lambda known: True) is True


def test_put_unless__16_threads_at_once__exactly_one_stores():
    # Given 16 threads of one process, as in a gthread worker, all released together
    cache = ProcessCache(max_entries=10, policy=Versioned())
    barrier = threading.Barrier(16)
    stored = []

    def record(value: int) -> None:
        barrier.wait()
        stored.append(cache.put_unless("digest", value, keep=lambda known: True))

    threads = [threading.Thread(target=record, args=(value,)) for value in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    # Then one of them stored, and the others saw its entry
    assert stored.count(True) == 1


def test_caches_clear__every_cache_of_the_process__emptied():
    # Given a cache of the policy's own, and every cache the apps declare, holding something
    own = ProcessCache(max_entries=10, policy=TimeToLive(lambda: 60))
    declared = [own, experiment_states, experiment_catalog, subject_types, api_tokens.snapshots, api_tokens.uses]
    for cache in declared:
        cache.put("key", object())

    # When
    caches_clear()

    # Then
    assert [len(cache) for cache in declared] == [0] * len(declared)
