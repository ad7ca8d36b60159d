"""docs/reference/configuration.md lists every environment variable the code reads, and only those: a variable
read by the service, its gunicorn settings, its proxy's render script or scripts/run-demo without a row there
fails, and so does a row that nothing reads any more. Where the Python code states a default, bounds or choices,
the row must say the same. It is the one settings table: no other page of the documentation repeats one.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

from tests.helpers import PROJECT_DIR

CONFIGURATION_DOC = PROJECT_DIR / "docs" / "reference" / "configuration.md"
# Every other page a reader may take settings from.
OTHER_DOCS = [PROJECT_DIR / "README.md", *sorted((PROJECT_DIR / "docs").rglob("*.md"))]
# Python that is not the service's: the tools, the clients' examples and packages, and what is not source at all.
NOT_SERVICE = {"tests", "bench", "devtools", "scripts", "var", "node_modules", "examples", "clients"}
# config/env.py's readers (env_str, env_int, ... and any added later) and the standard library's (a WSGI
# `environ` is a request's, not the process's).
READER = re.compile(r"(?:\w+\.)?(?:env_\w+|secret_key)|os\.environ\.get|os\.getenv")
# A table row whose first cell names variables: | `NAME` | ... or | `NAME` / `OTHER` | ...
SETTING_ROW = re.compile(r"^\| (`[A-Z][A-Z0-9_]*`(?:(?: / |, | or )`[A-Z_][A-Z0-9_]*`)*) \|", re.MULTILINE)
# A row of a table of the page: | `NAME` | default | accepted | meaning |
ROW = re.compile(r"^\| `([A-Z][A-Z0-9_]*)` \| (.+?) \| (.+?) \| .+ \|$", re.MULTILINE)
# scripts/run-demo reads a variable as ${NAME:-default}; deploy/proxy/render reads every PROXY_* it names.
SHELL_READS = {
    PROJECT_DIR / "scripts" / "run-demo": re.compile(r"\$\{([A-Z][A-Z0-9_]*):-"),
    PROJECT_DIR / "deploy" / "proxy" / "render": re.compile(r"\b(PROXY_[A-Z0-9_]+)\b"),
}


@dataclass(frozen=True)
class Read:
    name: str
    where: str
    reader: str
    default: object = None
    minimum: object = None
    maximum: object = None
    choices: object = None


@dataclass(frozen=True)
class Row:
    default: str
    accepted: str


def python_sources() -> list[Path]:
    tops = [path for path in PROJECT_DIR.iterdir() if path.name not in NOT_SERVICE and not path.name.startswith(".")]
    return sorted(
        source
        for top in tops
        for source in ([top] if top.suffix == ".py" else top.rglob("*.py") if top.is_dir() else [])
    )


def constant(node: ast.expr | None) -> object:
    return node.value if isinstance(node, ast.Constant) else None


def literal(node: ast.expr | None) -> object:
    try:
        return ast.literal_eval(node) if node is not None else None
    except (ValueError, TypeError):  # an expression, not a literal
        return None


def python_reads(path: Path) -> list[Read]:
    reads = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if (
            isinstance(node, ast.Subscript)
            and isinstance(node.ctx, ast.Load)
            and ast.unparse(node.value) == "os.environ"
        ):
            name, reader, arguments = constant(node.slice), "os.environ", []
        elif isinstance(node, ast.Call) and node.args and READER.fullmatch(ast.unparse(node.func)):
            name, reader, arguments = constant(node.args[0]), ast.unparse(node.func).split(".")[-1], node.args[1:]
        else:
            continue
        if isinstance(name, str):
            keywords = {keyword.arg: keyword.value for keyword in getattr(node, "keywords", [])}
            where = f"{path.relative_to(PROJECT_DIR)}:{node.lineno}"
            default = constant(arguments[0]) if arguments else None
            choices = literal(arguments[1] if len(arguments) > 1 else keywords.get("choices"))
            minimum, maximum = constant(keywords.get("minimum")), constant(keywords.get("maximum"))
            reads.append(Read(name, where, reader, default, minimum, maximum, choices))
    return reads


def code_reads() -> list[Read]:
    reads = [read for source in python_sources() for read in python_reads(source)]
    for path, pattern in SHELL_READS.items():
        text = path.read_text(encoding="utf-8")
        for match in pattern.finditer(text):
            line = text.count("\n", 0, match.start()) + 1
            reads.append(Read(match[1], f"{path.relative_to(PROJECT_DIR)}:{line}", "shell"))
    return reads


def documented() -> dict[str, Row]:
    return {match[1]: Row(match[2], match[3]) for match in ROW.finditer(CONFIGURATION_DOC.read_text(encoding="utf-8"))}


def shown(value: object) -> str:
    """A default as the page writes it: `true`, `600`, `localhost,127.0.0.1`."""
    return f"`{str(value).lower() if isinstance(value, bool) else value}`"


def accepted(read: Read) -> str | None:
    """What the page must say a reader accepts, for the readers whose bounds the code states."""
    if read.reader == "env_bool":
        return "boolean"
    if read.reader == "env_list":
        return "list"
    if read.reader == "env_choice" and isinstance(read.choices, tuple):
        *first, last = [f"`{choice}`" for choice in read.choices]
        return f"{', '.join(first)} or {last}" if first else last
    if read.reader == "env_int" and read.minimum is not None:
        return f"integer, {read.minimum} to {read.maximum}" if read.maximum is not None else f"integer ≥ {read.minimum}"
    return None


def test_configuration_docs__readers_found__in_the_settings_gunicorn_the_proxy_and_run_demo():
    where = {read.name: read.where.split(":")[0] for read in code_reads()}

    assert where["ASSIGNMENT_MAX_SUBJECTS"] == "config/settings.py"
    assert where["SECRET_KEY"] == "config/settings.py"
    assert where["GUNICORN_KEEPALIVE"] == "deploy/gunicorn.conf.py"
    assert where["PROXY_ENABLE_ID_LINK"] == "deploy/proxy/render"
    assert "GUNICORN_ACCESS_LOG" in where


def test_configuration_docs__every_variable_read__has_a_row():
    rows = documented()
    # Reversed, so each variable is reported where it is first read.
    missing = {read.name: read.where for read in reversed(code_reads()) if read.name not in rows}

    assert not missing, "read by the code but not documented in docs/reference/configuration.md: " + ", ".join(
        f"{name} ({where})" for name, where in sorted(missing.items())
    )


def test_configuration_docs__every_row__is_read_by_the_code():
    stale = sorted(set(documented()) - {read.name for read in code_reads()})

    assert not stale, f"docs/reference/configuration.md documents variables nothing reads: {stale}"


def test_configuration_docs__defaults_and_bounds_in_the_code__are_the_rows():
    rows = documented()
    wrong = []
    for read in code_reads():
        row = rows.get(read.name)
        if row is None:
            continue  # reported by the test above
        if read.default not in (None, "") and not row.default.startswith(shown(read.default)):
            wrong.append(f"{read.name} ({read.where}): default {shown(read.default)}, the page says {row.default!r}")
        if (expected := accepted(read)) and row.accepted != expected:
            wrong.append(f"{read.name} ({read.where}): accepts {expected!r}, the page says {row.accepted!r}")

    assert not wrong, "\n".join(wrong)


def test_configuration_docs__other_pages__link_to_the_table_instead_of_repeating_rows():
    read = {read.name for read in code_reads()}
    repeated = []
    for page in OTHER_DOCS:
        if page == CONFIGURATION_DOC:
            continue
        for match in SETTING_ROW.finditer(page.read_text(encoding="utf-8")):
            names = set(re.findall(r"`([A-Z_][A-Z0-9_]*)`", match[1])) & read
            if names:
                repeated.append(f"{page.relative_to(PROJECT_DIR)}: {', '.join(sorted(names))}")

    assert not repeated, "settings tables outside docs/reference/configuration.md (link to its rows instead):\n" + (
        "\n".join(repeated)
    )
