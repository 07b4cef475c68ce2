"""The sans-IO codecs are sans-IO by import too: loading one loads neither trio nor pluggy
(nor the kernel), checked in a fresh interpreter for each codec."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

PROBE = """
import json, sys
import {module}
print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] in ("trio", "pluggy", "herald"))))
"""


@pytest.mark.parametrize(
    "module",
    [
        "herald.plugins.amqp.codec",
        "herald.plugins.mqtt.codec",
        "herald.plugins.stomp.codec",
        "herald.cluster.frames",
    ],
)
def test_importing_a_codec_loads_no_io_and_no_plugin_machinery(module: str) -> None:
    done = subprocess.run(
        [sys.executable, "-c", PROBE.format(module=module)],
        capture_output=True,
        text=True,
        check=True,
    )
    loaded = json.loads(done.stdout)
    assert not [m for m in loaded if m.startswith(("trio", "pluggy"))], loaded
    kernel = {m for m in loaded if m.startswith("herald.core.")}
    assert kernel <= {"herald.core.errors", "herald.core.codec_kit"}, kernel  # no kernel
