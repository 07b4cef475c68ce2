"""docs/architecture.md lists the modules as they are (issue 20 part 7).

How the page is read: a heading that names a package folder in backticks (`core/`,
`plugins/mqtt/codec/`) opens that folder's section, and any other heading closes it; in a
section, the first cell of every table row names modules of that folder in backticks
(`` `adapter.py`, `session_io.py` ``). Modules are the `.py` files under the source folders
(core, storage, plugins, pipeline, cluster), `__init__.py` left out; a generated module
(plugins/amqp/codec/methods.py) is listed like any other.

Two checks, both ways: every module of the tree is named in its own folder's section (so a new
module, or one moved to another folder, fails until the table has a row for it), and every
module a table names exists in that folder (so a row left behind by a deleted module fails).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ARCHITECTURE = ROOT / "docs" / "architecture.md"
SOURCE_FOLDERS = ("core", "storage", "plugins", "pipeline", "cluster")

HEADING = re.compile(r"#{1,6}\s")
FOLDER = re.compile(r"`((?:[\w.-]+/)+)`")  # `core/`, `plugins/mqtt/codec/`
MODULE = re.compile(r"`((?:[\w.-]+/)*[\w.-]+\.py)`")  # `adapter.py` (or `sub/x.py`)


def tree_modules(root: Path = ROOT) -> set[str]:
    """Every module of the source folders, as a path from the repository's root."""
    found: set[str] = set()
    for top in SOURCE_FOLDERS:
        for path in (root / top).rglob("*.py"):
            if path.name != "__init__.py" and "__pycache__" not in path.parts:
                found.add(path.relative_to(root).as_posix())
    return found


def documented_modules(lines: Iterable[str]) -> dict[str, list[int]]:
    """Every module the tables name, as a path from the repository's root, with the line
    numbers of the rows naming it."""
    named: dict[str, list[int]] = {}
    folder: str | None = None
    in_code = False
    for number, line in enumerate(lines, 1):
        if line.lstrip().startswith("```"):
            in_code = not in_code
        elif in_code:
            continue
        elif HEADING.match(line):
            folders = FOLDER.findall(line)
            assert len(folders) <= 1, f"architecture.md:{number}: one folder per heading"
            folder = folders[0] if folders else None
        elif folder is not None and line.startswith("|"):
            first_cell = line.split("|")[1]
            for name in MODULE.findall(first_cell):
                named.setdefault(folder + name, []).append(number)
    return named


def read_doc() -> dict[str, list[int]]:
    return documented_modules(ARCHITECTURE.read_text(encoding="utf-8").splitlines())


def test_every_module_is_in_its_folders_table() -> None:
    missing = sorted(tree_modules() - set(read_doc()))
    assert not missing, (
        "modules missing from docs/architecture.md (add a row to the table under the heading "
        "that names their folder, e.g. `core/`):\n  " + "\n  ".join(missing)
    )


def test_every_module_a_table_names_exists() -> None:
    stale = {path: rows for path, rows in read_doc().items() if path not in tree_modules()}
    assert not stale, "docs/architecture.md names modules that are not in the tree:\n  " + (
        "\n  ".join(f"{path} (line {', '.join(map(str, rows))})" for path, rows in stale.items())
    )


def test_each_module_has_one_row() -> None:
    repeated = {path: rows for path, rows in read_doc().items() if len(rows) > 1}
    assert not repeated, f"modules named in more than one row of architecture.md: {repeated}"


def test_the_walk_sees_every_source_folder() -> None:
    """Guards the two checks above against passing on an empty walk (a wrong root)."""
    modules = tree_modules()
    for top in SOURCE_FOLDERS:
        assert any(path.startswith(f"{top}/") for path in modules), top


def test_the_checks_fail_on_a_missing_module_and_on_a_stale_row(tmp_path: Path) -> None:
    for path in ("core/broker.py", "core/gone_soon.py", "plugins/x/codec/wire.py"):
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text("")
    (tmp_path / "core/__init__.py").write_text("")
    doc = [
        "## The kernel: `core/`",
        "| module | responsibility |",
        "|---|---|",
        "| `broker.py`, `deleted.py` | the broker; a module that is gone |",
        "| `wire.py` | named under the wrong folder |",
        "",
        "Prose naming `gone_soon.py` is not a row.",
        "## Queues",
        "| `gone_soon.py` | under a heading without a folder: not counted |",
        "### The codec: `plugins/x/codec/`",
        "```",
        "| `ignored.py` | inside a code block |",
        "```",
        "| `wire.py` | wire primitives |",
    ]
    named = documented_modules(doc)
    assert set(named) == {
        "core/broker.py",
        "core/deleted.py",
        "core/wire.py",
        "plugins/x/codec/wire.py",
    }
    assert named["core/deleted.py"] == [4]
    tree = tree_modules(tmp_path)
    assert tree - set(named) == {"core/gone_soon.py"}  # missing from its table
    assert set(named) - tree == {"core/deleted.py", "core/wire.py"}  # stale rows
