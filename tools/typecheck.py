"""Run mypy over herald's folders under the import names pyproject.toml gives them.

`[tool.setuptools] package-dir` maps folders into one namespace (`herald.core` = `core/`,
`pyspark_herald` = `pipeline/autoload/pyspark_herald`, ...). The editable install serves that
mapping through an import hook, which no static checker follows, and mypy has no option that
names a package's folder. So this builds a throwaway link tree from the same table,

    .typecheck/herald/core -> ../../core
    .typecheck/pyspark_herald -> ../pipeline/autoload/pyspark_herald

(gitignored; `mypy_path` in `[tool.mypy]` points at it), checks the paths asked for through
it, and writes mypy's report with the real paths (`core/broker.py`, not the link's).

    .venv/bin/python tools/typecheck.py                  # the whole tree (make typecheck)
    .venv/bin/python tools/typecheck.py storage tests/storage

Paths outside the mapped folders (tests, tools, benchmarks) are checked where they are.
Extra mypy options go after `--`. The exit status is mypy's.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TREE = ".typecheck"
# What `make typecheck` checks when no path is given.
DEFAULT_PATHS = [
    "core",
    "plugins",
    "storage",
    "pipeline",
    "cluster",
    "tools",
    "benchmarks",
    "tests",
]


def package_dirs() -> dict[str, str]:
    """Folder (relative, POSIX) -> its place in the link tree, from pyproject.toml."""
    with open(ROOT / "pyproject.toml", "rb") as f:
        mapping = tomllib.load(f)["tool"]["setuptools"]["package-dir"]
    return {
        folder.rstrip("/"): f"{TREE}/{name.replace('.', '/')}" for name, folder in mapping.items()
    }


def build_tree(dirs: dict[str, str]) -> None:
    """(Re)create the link tree: one relative symlink per mapped folder."""
    for folder, link in dirs.items():
        path = ROOT / link
        path.parent.mkdir(parents=True, exist_ok=True)
        target = os.path.relpath(ROOT / folder, path.parent)
        if path.is_symlink() and os.readlink(path) == target:
            continue
        if path.is_symlink():
            path.unlink()
        path.symlink_to(target, target_is_directory=True)


def through_tree(arg: str, dirs: dict[str, str]) -> list[str]:
    """The path(s) mypy should get for one path given on the command line."""
    rel = Path(os.path.relpath(Path(arg).resolve(), ROOT)).as_posix()
    # The deepest mapped folder holding it (pipeline/autoload/pyspark_herald before pipeline).
    for folder in sorted(dirs, key=len, reverse=True):
        if rel == folder or rel.startswith(folder + "/"):
            out = [dirs[folder] + rel[len(folder) :]]
            break
    else:
        out = [rel]
    # Mapped folders inside it that live under another name (pyspark_herald inside pipeline/);
    # the copy under the outer name is left out by `exclude` in [tool.mypy].
    out += [link for folder, link in dirs.items() if folder.startswith(rel + "/")]
    return out


def real_paths(line: str, dirs: dict[str, str]) -> str:
    for folder, link in sorted(dirs.items(), key=lambda item: len(item[1]), reverse=True):
        if link + "/" in line:
            line = line.replace(link + "/", folder + "/")
    return line


def main(argv: list[str]) -> int:
    paths, extra = argv, []
    if "--" in argv:
        cut = argv.index("--")
        paths, extra = argv[:cut], argv[cut + 1 :]
    dirs = package_dirs()
    build_tree(dirs)
    asked = [p for given in paths or ["."] for p in (DEFAULT_PATHS if given == "." else [given])]
    targets: list[str] = []
    for arg in asked:
        for target in through_tree(arg, dirs):
            if target not in targets:
                targets.append(target)
    if paths:  # a part of the tree may import none of the modules an override names
        extra.insert(0, "--no-warn-unused-configs")
    cmd = [sys.executable, "-m", "mypy", *extra, *targets]
    proc = subprocess.run(
        cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    for line in proc.stdout.splitlines():
        print(real_paths(line, dirs))
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
