"""methods.py is generated: CI fails when it drifts from tools/amqp_spec.py and the generator."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from herald.plugins.amqp.codec.methods import DECODERS, METHODS, Method

ROOT = Path(__file__).resolve().parents[2]
GENERATOR = ROOT / "tools" / "amqp_codegen.py"
GENERATED = ROOT / "plugins" / "amqp" / "codec" / "methods.py"


def run_check(generator: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(generator), "--check"], capture_output=True, text=True, check=False
    )


def test_methods_py_is_what_the_generator_writes() -> None:
    result = run_check(GENERATOR)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_check_fails_on_a_hand_edit(tmp_path: Path) -> None:
    (tmp_path / "tools").mkdir()
    for name in ("amqp_codegen.py", "amqp_spec.py"):
        shutil.copy(ROOT / "tools" / name, tmp_path / "tools" / name)
    target = tmp_path / "plugins" / "amqp" / "codec" / "methods.py"
    target.parent.mkdir(parents=True)
    target.write_text(GENERATED.read_text().replace("NAME = ", "NAME= ", 1))
    result = run_check(tmp_path / "tools" / "amqp_codegen.py")
    assert result.returncode == 1
    assert "is stale" in result.stderr


def test_the_generated_file_says_so() -> None:
    assert GENERATED.read_text().startswith(
        '"""GENERATED FILE, DO NOT EDIT: python tools/amqp_codegen.py'
    )


@pytest.mark.parametrize("cls", list(METHODS.values()), ids=lambda cls: cls.NAME)
def test_every_method_round_trips_with_its_defaults(cls: type[Method]) -> None:
    method = cls()
    payload = method.encode()
    key = int.from_bytes(payload[:4], "big")
    assert (key >> 16, key & 0xFFFF) == (cls.CLASS_ID, cls.METHOD_ID)
    assert DECODERS[key](payload, 4, len(payload)) == method
