"""The locks (requirements*.txt, written by scripts/lock-requirements from requirements*.in) pin every package
with hashes, agree with their .in files and with each other, and every script installs through them,
hash-checked (docs/how-to/deploy.md#dependencies). Files only: no network, no resolver.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.helpers import PROJECT_DIR

IN_FILES = sorted(PROJECT_DIR.glob("requirements*.in"))
LOCK_FILES = sorted(PROJECT_DIR.glob("requirements*.txt"))
HASH = re.compile(r"--hash=sha256:[0-9a-f]{64}")
# A lock's entry: `name==version[ ; marker]`, then its hashes on continuation lines.
PIN = re.compile(r"^(?P<name>[A-Za-z0-9._-]+)==(?P<version>[^\s;\\]+)(?: ; (?P<marker>[^\\]+?))?\s*\\?$")
# The lock's `# via` annotation naming an .in file: the package is a direct requirement of that file.
VIA_IN = re.compile(r"#\s+(?:via )?-r (\S+\.in)$")


@dataclass
class Locked:
    version: str
    hashes: int
    direct_of: set[str]


def lock_entries(lock: Path) -> dict[str, Locked]:
    entries: dict[str, Locked] = {}
    current = None
    for line in lock.read_text().splitlines():
        if not line.strip():
            continue
        if not line.startswith((" ", "#")):
            match = PIN.match(line)
            assert match, f"{lock.name}: not `name==version`: {line!r}"
            current = Locked(match["version"], 0, set())
            entries[canonicalize_name(match["name"])] = current
        elif line.lstrip().startswith("--hash="):
            assert HASH.fullmatch(line.strip().rstrip(" \\")), f"{lock.name}: not a sha256 hash: {line!r}"
            current.hashes += 1
        elif (via := VIA_IN.search(line)) and current is not None:
            current.direct_of.add(via[1])
    return entries


def in_requirements(in_file: Path) -> tuple[list[Requirement], list[Path]]:
    """The requirements of an .in file and of those it includes with -r; and the files it names with -c."""
    requirements: list[Requirement] = []
    constraints: list[Path] = []
    for raw in in_file.read_text().splitlines():
        line = raw.split("#", 1)[0].strip()
        if line.startswith("-r "):
            included, _ = in_requirements(PROJECT_DIR / line[3:].strip())
            requirements += included
        elif line.startswith("-c "):
            constraints.append(PROJECT_DIR / line[3:].strip())
        elif line:
            assert not line.startswith("-"), f"{in_file.name}: an option the tests do not know: {line!r}"
            requirements.append(Requirement(line))
    return requirements, constraints


def lock_of(in_file: Path) -> Path:
    return in_file.with_suffix(".txt")


def test_locks__one_per_in_file__none_without_one():
    assert [lock_of(in_file) for in_file in IN_FILES] == LOCK_FILES


@pytest.mark.parametrize("lock", LOCK_FILES, ids=lambda path: path.name)
def test_lock__every_package_pinned_with_hashes__written_by_the_lock_script(lock):
    # Given a lock as scripts/lock-requirements wrote it
    text = lock.read_text()
    entries = lock_entries(lock)

    # Then every package has one version and at least one sha256, and the file says how it is remade
    assert entries
    assert [name for name, entry in entries.items() if entry.hashes == 0] == []
    assert "#    scripts/lock-requirements\n" in text
    assert not re.search(r"^\s*(-e|--index-url|--extra-index-url|--find-links|-f)\b", text, re.MULTILINE)


@pytest.mark.parametrize("in_file", IN_FILES, ids=lambda path: path.name)
def test_lock__its_in_file_changed_since__lock_script_not_run__fails(in_file):
    # Given an .in file, the requirements it includes, and its lock
    requirements, _ = in_requirements(in_file)
    entries = lock_entries(lock_of(in_file))
    direct = {canonicalize_name(requirement.name) for requirement in requirements}

    # Then each requirement is locked at a version it allows
    for requirement in requirements:
        name = canonicalize_name(requirement.name)
        assert name in entries, f"{in_file.name}: {requirement} is not in {lock_of(in_file).name}"
        assert requirement.specifier.contains(entries[name].version, prereleases=True), (
            f"{lock_of(in_file).name} has {name}=={entries[name].version}, {in_file.name} asks {requirement}"
        )
    # And the lock's direct requirements are exactly those of the .in files: none removed or added since
    locked_direct = {name for name, entry in entries.items() if entry.direct_of}
    assert locked_direct == direct


@pytest.mark.parametrize("in_file", IN_FILES, ids=lambda path: path.name)
def test_lock__constrained_by_another_lock__same_versions_as_it(in_file):
    # Given a lock whose .in file is constrained (-c) by another lock
    _, constraints = in_requirements(in_file)
    entries = lock_entries(lock_of(in_file))

    # Then every package in both has the same version in both
    for constraint in constraints:
        assert constraint in LOCK_FILES
        others = lock_entries(constraint)
        differing = {
            name: (entry.version, others[name].version)
            for name, entry in entries.items()
            if name in others and entry.version != others[name].version
        }
        assert differing == {}, f"{lock_of(in_file).name} against {constraint.name}"


def shell_scripts() -> list[Path]:
    files = [path for folder in ("scripts", "bench", ".ci", "deploy") for path in (PROJECT_DIR / folder).rglob("*")]
    return sorted(path for path in files if path.is_file() and re.match(rb"#!.*\bbash\b|#!/bin/sh", path.read_bytes()))


def test_scripts__every_pip_install__hash_checked_from_a_lock():
    # Given every shell script of the repository's tools
    installs = [
        (path.relative_to(PROJECT_DIR), line.strip())
        for path in shell_scripts()
        for line in path.read_text().splitlines()
        if re.search(r"\bpip3? install\b|-m pip install\b", line) and not line.lstrip().startswith("#")
    ]

    # Then each pip install checks hashes against a lock
    assert installs
    assert [
        (path, line) for path, line in installs if "--require-hashes" not in line or not re.search(r"-r \S", line)
    ] == []
