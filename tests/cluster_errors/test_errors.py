"""`NotMaster` and `ReplicationTimeout` (core/errors.py): their codes, where they say the master
is for each protocol, and the STOMP words for them (plugins/stomp/errors.py)."""

from __future__ import annotations

import copy

from herald.core.errors import (
    REPLICATION_TIMEOUT_TEXT,
    KernelError,
    NotMaster,
    ReplicationTimeout,
    ResourceError,
)
from herald.plugins.stomp.errors import kernel_error_detail, kernel_error_message

ADDRS = {"amqp": "10.0.0.3:5672", "amqps": "10.0.0.3:5671", "mqtt": "10.0.0.3:1883"}


def test_not_master_closes_the_connection_320() -> None:
    error = NotMaster("n1 is no longer master of g1 (epoch 9: n2 is)", "10.0.0.3:5672")
    assert isinstance(error, ResourceError)
    assert (error.reply_code, error.connection_level) == (320, True)
    assert error.master == "10.0.0.3:5672"
    assert (
        error.text_for("amqp") == "n1 is no longer master of g1 (epoch 9: n2 is); use 10.0.0.3:5672"
    )
    assert NotMaster().reply_text == "this node is not its group's master"


def test_not_master_names_the_master_per_protocol_when_it_knows_them() -> None:
    error = NotMaster("n1 is a slave", addrs=ADDRS)
    assert error.master_for("amqp") == "10.0.0.3:5672"
    assert error.master_for("amqp", tls=True) == "10.0.0.3:5671"
    assert error.master_for("mqtt", tls=True) == "10.0.0.3:1883"  # no mqtts: the plain one
    assert error.master_for("stomp") is None  # the master serves no STOMP
    assert error.text_for("stomp") == "n1 is a slave"
    assert NotMaster("n1 is a slave").master_for("amqp") is None


def test_a_copy_keeps_the_master() -> None:
    error = copy.copy(NotMaster("n1 is a slave", "h:1", addrs=ADDRS))
    assert (error.reply_text, error.master, dict(error.addrs)) == ("n1 is a slave", "h:1", ADDRS)


def test_replication_timeout_fails_the_wait_not_the_connection() -> None:
    error = ReplicationTimeout()
    assert isinstance(error, ResourceError)
    assert (error.reply_code, error.connection_level) == (506, False)
    assert error.reply_text == REPLICATION_TIMEOUT_TEXT
    assert "stored on the master and may still be delivered" in error.reply_text


def test_stomp_names_them_by_type() -> None:
    assert kernel_error_message(NotMaster("x")) == "Not master"
    assert kernel_error_message(ReplicationTimeout()) == "Replication timeout"
    assert kernel_error_message(ResourceError("too many")) == "Resource error"
    assert kernel_error_message(KernelError("?")) == "Internal error"
    not_master = NotMaster("n1 is a slave", addrs={"stomp": "h:61613", "stomps": "h:61614"})
    assert kernel_error_detail(not_master) == "n1 is a slave; use h:61613"
    assert kernel_error_detail(not_master, tls=True) == "n1 is a slave; use h:61614"
    assert kernel_error_detail(ReplicationTimeout("late")) == "late"
