"""`herald run` tells glibc to give large blocks back (core/process_memory.py): the second
login's scrypt must not leave its 16 MiB in the broker's RSS."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from herald.core.process_memory import fix_mmap_threshold

PROBE = """
import json, sys, threading
from herald.core import passwords
from herald.core.process_memory import fix_mmap_threshold

def rss_mib():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / 2**20

fixed = fix_mmap_threshold() if sys.argv[1] == "fixed" else None
stored = passwords.hash_password("guest")  # the first scrypt: glibc raises its threshold here
before = rss_mib()
def logins():
    for _ in range(3):
        assert passwords.verify_password("guest", stored)
thread = threading.Thread(target=logins)  # as auth runs them: in a worker thread
thread.start(); thread.join()
print(json.dumps({"fixed": fixed, "grew_mib": rss_mib() - before}))
"""


def grown(mode: str) -> dict[str, float]:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, mode], capture_output=True, text=True, check=True
    )
    return json.loads(done.stdout)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_scrypt_buffers_go_back_to_the_os_once_the_threshold_is_fixed() -> None:
    fixed = grown("fixed")
    assert fixed["fixed"] is True
    assert fixed["grew_mib"] < 4, fixed
    assert grown("default")["grew_mib"] > 12  # what the fix is for: glibc keeps 16 MiB


def test_a_users_malloc_setting_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MALLOC_MMAP_THRESHOLD_", "131072")
    assert fix_mmap_threshold() is False
