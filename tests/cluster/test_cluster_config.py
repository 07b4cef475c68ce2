"""The `[cluster]` section and the cluster plugin's checks: defaults, errors naming the key,
later stages' keys accepted, and the refusals of `herald_configure`."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from herald.cluster import keys
from herald.cluster.addresses import advertised_host, client_addresses
from herald.cluster.config import ClusterConfig, split_address
from herald.cluster.plugin import cluster_config
from herald.core.config import HeraldConfig, load_config
from herald.core.errors import ConfigError
from herald.core.plugin_types import Listener
from herald.core.plugins import Plugins, get_plugin_manager

ENABLED = ["cluster.enabled=true", 'broker.node_name="n1"']


@pytest.fixture(scope="module")
def plugins() -> Plugins:
    return get_plugin_manager()


def load(plugins: Plugins, *overrides: str) -> HeraldConfig:
    return load_config(overrides=overrides, plugin_sections=plugins.config_sections())


def configured(plugins: Plugins, *overrides: str) -> HeraldConfig:
    config = load(plugins, *overrides)
    plugins.configure(config)
    return config


def error(plugins: Plugins, *overrides: str) -> str:
    with pytest.raises(ConfigError) as caught:
        configured(plugins, *overrides)
    return str(caught.value)


def test_the_cluster_plugin_is_installed(plugins: Plugins) -> None:
    assert "cluster" in plugins.names()
    assert plugins.config_sections()["cluster"] is ClusterConfig
    assert {c.name for c in plugins.cli_commands()} >= {"cluster", "nameserver"}


def test_defaults_are_a_standalone_broker(plugins: Plugins) -> None:
    config = configured(plugins)
    section = config.section("cluster")
    assert section == ClusterConfig() and not section.enabled
    assert cluster_config(config) is None


def test_the_design_example_loads(plugins: Plugins, tmp_path: Path) -> None:
    """CLUSTER.md §9's example, every key of it, including those read by later stages."""
    path = tmp_path / "node.toml"
    path.write_text(
        """
[broker]
node_name = "n1"
[cluster]
enabled = true
name = "prod"
group = "g1"
replication = "sync"
min_in_sync_replicas = 2
slave_ack = "flushed"
sync_timeout_ms = 3000
max_lag_ms = 15000
etcd = ["http://10.0.0.1:2379", "http://10.0.0.2:2379", "http://10.0.0.3:2379"]
lease_ttl_s = 10
lease_guard_s = 1
nameservers = ["10.0.0.1:9876", "10.0.0.2:9876"]
register_interval_s = 30
listen = "0.0.0.0:25680"
advertise = ""
secret = "s3cret"
retain_max_bytes = 4294967296
slot_window = 1000
slot_timeout_ms = 100
slots_per_queue = 2
mark_recovered_redelivered = true
"""
    )
    config = load_config(path, plugin_sections=plugins.config_sections())
    plugins.configure(config)
    section = cluster_config(config)
    assert section is not None
    assert section.name == "prod" and section.group_of("n1") == "g1"
    assert section.etcd[2] == "http://10.0.0.3:2379" and section.nameservers[1] == "10.0.0.2:9876"
    assert section.keepalive_interval_s == pytest.approx(10 / 3)
    assert "s3cret" not in repr(section)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["cluster.name=''"], "cluster.name: expected a name of 1-255 characters"),
        (["cluster.etcd=[]"], "cluster.etcd: expected at least one endpoint"),
        (["cluster.etcd=['ftp://h:1']"], "cluster.etcd: [0]: expected http://host:port"),
        (["cluster.nameservers=['h:1', 'h']"], "cluster.nameservers: [1]: expected host:port"),
        (["cluster.lease_ttl_s=1"], "cluster.lease_ttl_s: must be at least 2"),
        (["cluster.lease_ttl_s=2.5"], "cluster.lease_ttl_s: expected an integer"),
        (["cluster.lease_guard_s=0"], "cluster.lease_guard_s: expected more than 0"),
        (
            ["cluster.lease_ttl_s=2", "cluster.lease_guard_s=1.5"],
            "cluster.lease_guard_s: expected more than 0 and at most lease_ttl_s / 2 = 1,",
        ),
        (["cluster.register_interval_s=0"], "cluster.register_interval_s: must be more than 0"),
        (["cluster.listen='25680'"], "cluster.listen: expected host:port"),
        (["cluster.advertise='h:0'"], "cluster.advertise: expected host:port"),
        (["cluster.replication='semi'"], "cluster.replication: expected 'sync' or 'async'"),
        (["cluster.slave_ack='acked'"], "cluster.slave_ack: expected 'flushed' or 'written'"),
        (["cluster.slots_per_queue=0"], "cluster.slots_per_queue: must be at least 1"),
        (["cluster.enable=true"], "unknown key 'cluster.enable' (did you mean 'cluster.enabled'?"),
    ],
)
def test_bad_values_name_their_key(
    plugins: Plugins, overrides: Sequence[str], message: str
) -> None:
    assert message in error(plugins, *overrides)


def test_a_cluster_needs_the_commit_log(plugins: Plugins) -> None:
    message = error(plugins, *ENABLED, 'store.backend="memory"')
    assert 'cluster.enabled = true needs store.backend = "commitlog"' in message
    assert "'memory'" in message


def test_a_cluster_needs_a_node_name_of_its_own(plugins: Plugins) -> None:
    message = error(plugins, "cluster.enabled=true")
    assert "cluster.enabled = true needs broker.node_name" in message
    assert "'herald@localhost'" in message


def test_a_disabled_section_is_not_checked(plugins: Plugins) -> None:
    config = configured(plugins, 'cluster.name="x"', 'store.backend="memory"')
    assert cluster_config(config) is None


def test_keys_percent_encode_names() -> None:
    assert keys.node_key("prod", "n1@host") == "/herald/prod/nodes/n1%40host"
    assert keys.node_key("a/b", "n/1") == "/herald/a%2Fb/nodes/n%2F1"
    assert keys.node_of("a/b", "/herald/a%2Fb/nodes/n%2F1") == "n/1"
    assert keys.node_of("prod", "/herald/prod/groups/g1/state") is None


def test_addresses() -> None:
    assert split_address("[::1]:5672") == ("::1", 5672)
    assert split_address("::1:5672") is None and split_address("h:0") is None
    listeners = [
        Listener("amqp", "tcp", "0.0.0.0", 5672),
        Listener("amqp", "tcp", "127.0.0.1", 5673),  # the first of a kind wins
        Listener("amqp", "tls", "::", 5671),
        Listener("mqtt", "ws", "127.0.0.1", 15675),  # not published
        Listener("management", "http", "127.0.0.1", 15672),
    ]
    assert client_addresses(listeners, "10.0.0.2") == {
        "amqp": "10.0.0.2:5672",
        "amqps": "10.0.0.2:5671",
        "management": "127.0.0.1:15672",
    }
    assert advertised_host(ClusterConfig(advertise="node1.example:25680")) == "node1.example"
    assert advertised_host(ClusterConfig(listen="127.0.0.2:25680")) == "127.0.0.2"
    assert advertised_host(ClusterConfig()) not in ("", "0.0.0.0")
