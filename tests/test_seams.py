"""The kernel's explicit seams (issue 20): what reaches what, checked on the code itself.

- a queue reaches its services and its owner through what it was given, never through
  `vhost.broker` (so a queue works with any `QueueOwner`, not only a broker's vhost);
- core/cli.py imports no plugin: plugins' commands come from a hook;
- core/message.py and core/native_codec.py do not import each other both ways.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Hashable
from pathlib import Path

from herald.core.broker import Broker
from herald.core.message import Message
from herald.core.queue import Queue
from herald.core.queue_args import QueueArguments
from herald.core.queue_entry import DeadLetterReason
from herald.core.queue_services import QueueDeclaration, QueueOwner
from tests.sinks import RecordingSink, msg

ROOT = Path(__file__).resolve().parent.parent
CORE = ROOT / "core"

QUEUE_MODULES = [
    "queue.py",
    "queue_clock.py",
    "queue_entry.py",
    "queue_swap.py",
    "queue_services.py",
    "queue_settlement.py",
    "ready_list.py",
    "swap.py",
    "consumer.py",
    "dead_letter.py",
]


def tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(), str(path))


def imported(node: ast.AST) -> list[str]:
    """Every module an import statement anywhere under `node` names."""
    names: list[str] = []
    for child in ast.walk(node):
        if isinstance(child, ast.Import):
            names += [alias.name for alias in child.names]
        elif isinstance(child, ast.ImportFrom) and child.module:
            names.append(child.module)
    return names


# -- queues ------------------------------------------------------------------------------------


def test_no_queue_module_reaches_the_broker() -> None:
    for name in QUEUE_MODULES:
        found = [
            f"{name}:{node.lineno}"
            for node in ast.walk(tree(CORE / name))
            if isinstance(node, ast.Attribute) and node.attr in ("broker", "metadata")
        ]
        assert found == [], "a queue reaches through its vhost: " + ", ".join(found)


class PlainOwner:
    """A `QueueOwner` that is not a virtual host: records what the queue asks of it."""

    name = "elsewhere"

    def __init__(self) -> None:
        self.deleted: list[tuple[str, Hashable | None]] = []
        self.dead: list[tuple[Message, str, DeadLetterReason]] = []

    def delete_queue(
        self,
        name: str,
        *,
        if_unused: bool = False,
        if_empty: bool = False,
        owner: Hashable | None = None,
    ) -> int:
        self.deleted.append((name, owner))
        return 0

    def dead_letter(self, message: Message, queue: Queue, reason: DeadLetterReason) -> bool:
        self.dead.append((message, queue.name, reason))
        return True


async def test_a_queue_needs_only_its_services_and_an_owner(kernel: Broker) -> None:
    owner = PlainOwner()
    typed: QueueOwner = owner
    arguments = {"x-dead-letter-exchange": "dlx"}
    declaration = QueueDeclaration(
        "lone",
        auto_delete=True,
        arguments=arguments,
        args=QueueArguments.parse(arguments, "lone", owner.name),
    )
    queue = Queue(typed, kernel.queue_services, declaration)

    queue.push(msg("one"))
    queue.push(msg("two"))
    sink = RecordingSink()
    consumer = queue.add_consumer("c", sink, prefetch_count=10)
    first, second = sink.take()
    queue.ack(first)
    queue.reject(second, requeue=False)
    assert [(m.content.body if m.content else b"", q, r) for m, q, r in owner.dead] == [
        (b"two", "lone", DeadLetterReason.REJECTED)
    ]
    assert queue.statistics().acked == 1

    queue.remove_consumer(consumer)  # auto-delete: the owner is asked to delete it
    assert owner.deleted == [("lone", None)]
    assert "lone" not in kernel.default_vhost.queues  # nothing went to the broker's vhost


# -- the command line ---------------------------------------------------------------------------


def test_the_cli_module_imports_no_plugin() -> None:
    names = imported(tree(CORE / "cli.py"))
    assert [n for n in names if n.startswith(("herald.plugins", "herald.pipeline"))] == []

    code = (
        "import sys, herald.core.cli\n"
        "found = sorted(m for m in sys.modules"
        " if m.startswith(('herald.plugins', 'herald.pipeline')))\n"
        "assert not found, found\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


# -- messages and the native codec ----------------------------------------------------------------


def test_the_native_codec_does_not_import_messages() -> None:
    assert not [n for n in imported(tree(CORE / "native_codec.py")) if n == "herald.core.message"]
    code = (
        "import sys, herald.core.native_codec\n"
        "assert 'herald.core.message' not in sys.modules\n"
        "from herald.core.message import CodecRegistry, NATIVE_PROTOCOL\n"
        "assert NATIVE_PROTOCOL in CodecRegistry().protocols\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_messages_import_nothing_lazily() -> None:
    module = tree(CORE / "message.py")
    nested = [
        name
        for node in ast.walk(module)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        for name in imported(node)
    ]
    assert nested == []
