"""Config loading: defaults, TOML, overrides, plugin sections, and errors that name the key."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from herald.core.config import (
    AuthSection,
    BrokerSection,
    HeraldConfig,
    MemorySection,
    load_config,
    parse_watermark,
)
from herald.core.errors import ConfigError
from herald.core.tls import TLSSection

REPO = Path(__file__).resolve().parent.parent


@attrs.frozen
class TlsConfig:
    certfile: str = ""
    verify: bool = True


@attrs.frozen
class AmqpConfig:
    """A plugin's section class, as a protocol plugin would declare it."""

    host: str = "0.0.0.0"
    port: int = 5672
    frame_max: int = 131072
    tls: TlsConfig = TlsConfig()


@attrs.frozen
class MqttConfig:
    port: int = 1883


SECTIONS = {"amqp": AmqpConfig, "mqtt": MqttConfig}


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "herald.toml"
    path.write_text(text, encoding="utf-8")
    return path


def error_of(**kwargs: Any) -> str:  # load_config's arguments
    with pytest.raises(ConfigError) as info:
        load_config(**kwargs)
    message = str(info.value)
    assert message.startswith("config: ")
    assert "\n" not in message
    return message


# -- defaults and files ------------------------------------------------------------------------


def test_defaults() -> None:
    config = load_config()
    assert config == HeraldConfig()
    assert config.broker.data_dir == Path("data")
    assert config.broker.plugins is None
    assert config.broker.default_vhost == "/"
    assert config.broker.graceful_timeout == 5.0
    assert config.broker.log_level == "info"
    assert config.broker.node_name == "herald@localhost"
    assert config.store.backend == "commitlog"
    assert config.memory.high_watermark == 0.4
    assert config.memory.check_interval == 1.0
    assert config.auth.default_user == "guest"
    assert config.auth.default_password == "guest"
    assert config.auth.loopback_users == ("guest",)
    assert dict(config.plugins) == {}


def test_toml_file(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
        [broker]
        data_dir = "/var/lib/herald"
        plugins = ["amqp", "mqtt"]
        graceful_timeout = 2
        log_level = "WARNING"

        [memory]
        high_watermark = "2GiB"

        [auth]
        loopback_users = []

        [amqp]
        port = 5673
        tls = { certfile = "/etc/cert.pem" }
        """,
    )
    config = load_config(path, plugin_sections=SECTIONS)
    assert config.broker.data_dir == Path("/var/lib/herald")
    assert config.broker.plugins == ("amqp", "mqtt")
    assert config.broker.graceful_timeout == 2.0
    assert isinstance(config.broker.graceful_timeout, float)
    assert config.broker.log_level == "warning"
    assert config.memory.high_watermark_bytes(total_ram=8 * 2**30) == 2 * 2**30
    assert config.auth.loopback_users == ()
    assert config.section("amqp") == AmqpConfig(port=5673, tls=TlsConfig(certfile="/etc/cert.pem"))
    assert config.section("mqtt") == MqttConfig()  # absent section: the class's defaults


def test_toml_syntax_error_names_the_file(tmp_path: Path) -> None:
    path = write(tmp_path, "[broker]\ndata_dir = \n")
    message = error_of(path=path)
    assert str(path) in message
    assert "invalid TOML" in message
    assert "line 2" in message  # tomllib's own message


def test_missing_file(tmp_path: Path) -> None:
    message = error_of(path=tmp_path / "nope.toml")
    assert "nope.toml" in message
    assert "cannot read" in message


def test_data_is_merged_over_the_file(tmp_path: Path) -> None:
    path = write(tmp_path, '[broker]\nnode_name = "a@h"\ndefault_vhost = "v"\n')
    config = load_config(path, data={"broker": {"node_name": "b@h"}})
    assert config.broker.node_name == "b@h"
    assert config.broker.default_vhost == "v"


def test_the_example_config_is_valid_and_shows_the_defaults() -> None:
    assert load_config(REPO / "herald.example.toml") == HeraldConfig()


def test_the_docs_and_the_example_name_every_key() -> None:
    docs = (REPO / "docs" / "configuration.md").read_text(encoding="utf-8")
    example = (REPO / "herald.example.toml").read_text(encoding="utf-8")
    for section, cls in {
        "broker": BrokerSection,
        "memory": MemorySection,
        "auth": AuthSection,
        "tls": TLSSection,
    }.items():
        for field in attrs.fields(cls):
            assert f"`{section}.{field.name}`" in docs
            assert f"{field.name} = " in example
    assert "`store.backend`" in docs


# -- overrides ---------------------------------------------------------------------------------


def test_overrides_are_typed_toml_values() -> None:
    config = load_config(
        overrides=[
            "broker.graceful_timeout=2.5",
            "memory.check_interval=3",
            'broker.plugins=["amqp"]',
            "amqp.port=5673",
            "amqp.tls.verify=false",
        ],
        plugin_sections=SECTIONS,
    )
    assert config.broker.graceful_timeout == 2.5
    assert config.memory.check_interval == 3.0
    assert config.broker.plugins == ("amqp",)
    assert config.section("amqp").port == 5673
    assert config.section("amqp").tls.verify is False


def test_overrides_fall_back_to_plain_strings() -> None:
    config = load_config(
        overrides=[
            "broker.log_level=debug",
            "broker.data_dir=/tmp/herald data",
            "broker.plugins=amqp, mqtt",
            "amqp.host=127.0.0.1",
            "amqp.tls.certfile=/etc/x.pem",
        ],
        plugin_sections=SECTIONS,
    )
    assert config.broker.log_level == "debug"
    assert config.broker.data_dir == Path("/tmp/herald data")
    assert config.broker.plugins == ("amqp", "mqtt")
    assert config.section("amqp").host == "127.0.0.1"
    assert config.section("amqp").tls.certfile == "/etc/x.pem"


def test_a_string_key_keeps_text_that_looks_like_another_type() -> None:
    config = load_config(
        overrides=["auth.default_password=1234", "broker.node_name=true", "amqp.host=1e3"],
        plugin_sections=SECTIONS,
    )
    assert config.auth.default_password == "1234"
    assert config.broker.node_name == "true"
    assert config.section("amqp").host == "1e3"


def test_overrides_beat_the_file_and_the_last_one_wins(tmp_path: Path) -> None:
    path = write(tmp_path, "[amqp]\nport = 1\nframe_max = 4096\n")
    config = load_config(path, overrides=["amqp.port=2", "amqp.port=3"], plugin_sections=SECTIONS)
    assert config.section("amqp") == AmqpConfig(port=3, frame_max=4096)


@pytest.mark.parametrize("override", ["broker.node_name", "=1", " =1", ".x=1", "broker..x=1"])
def test_malformed_override_is_named(override: str) -> None:
    message = error_of(overrides=[override])
    assert repr(override) in message
    assert "KEY=VALUE" in message


def test_override_through_a_scalar_is_an_error() -> None:
    message = error_of(overrides=["amqp.port=1", "amqp.port.x=2"], plugin_sections=SECTIONS)
    assert "'amqp.port' is not a table" in message


def test_with_overrides_validates_and_keeps_plugin_sections() -> None:
    config = load_config(overrides=["amqp.port=1"], plugin_sections=SECTIONS)
    changed = config.with_overrides("broker.graceful_timeout=1", "mqtt.port=2")
    assert changed.broker.graceful_timeout == 1.0
    assert changed.section("amqp").port == 1
    assert changed.section("mqtt").port == 2
    assert config.broker.graceful_timeout == 5.0  # the original is unchanged
    with pytest.raises(ConfigError, match=r"broker\.graceful_timeout: must be more than 0"):
        config.with_overrides("broker.graceful_timeout=0")


def test_evolve_runs_the_validators() -> None:
    with pytest.raises(ConfigError, match="graceful_timeout"):
        attrs.evolve(BrokerSection(), graceful_timeout=-1.0)
    assert attrs.evolve(BrokerSection(), graceful_timeout=1.0).graceful_timeout == 1.0


# -- errors name the key -----------------------------------------------------------------------


def test_unknown_section() -> None:
    message = error_of(data={"brokr": {}}, plugin_sections=SECTIONS)
    assert message == (
        "config: unknown key 'brokr' (did you mean 'broker'? "
        "known sections: amqp, auth, broker, memory, mqtt, queues, store, tls)"
    )


def test_unknown_key_in_a_section() -> None:
    message = error_of(overrides=["broker.data_dri=x"])
    assert message.startswith(
        "config: unknown key 'broker.data_dri' (did you mean 'broker.data_dir'?"
    )
    assert "graceful_timeout" in message  # the known keys are listed


def test_unknown_key_in_a_nested_plugin_table() -> None:
    message = error_of(data={"amqp": {"tls": {"cafile": "x"}}}, plugin_sections=SECTIONS)
    assert "unknown key 'amqp.tls.cafile'" in message
    assert "certfile, verify" in message


def test_wrong_type_names_the_key() -> None:
    assert error_of(overrides=["broker.graceful_timeout=abc"]) == (
        "config: broker.graceful_timeout: expected a number, got 'abc'"
    )
    assert error_of(data={"broker": {"graceful_timeout": True}}) == (
        "config: broker.graceful_timeout: expected a number, got true"
    )
    assert error_of(data={"broker": {"node_name": 3}}) == (
        "config: broker.node_name: expected a string, got 3"
    )
    assert error_of(data={"amqp": {"port": "5672"}}, plugin_sections=SECTIONS) == (
        "config: amqp.port: expected an integer, got '5672'"
    )
    assert error_of(data={"broker": {"plugins": ["amqp", 7]}}) == (
        "config: broker.plugins[1]: expected a string, got 7"
    )
    assert error_of(data={"broker": 3}) == "config: broker: expected a table, got 3"


def test_rule_violations_name_the_key() -> None:
    assert error_of(overrides=["broker.log_level=loud"]) == (
        "config: broker.log_level: expected one of debug, info, warning, error, got 'loud'"
    )
    assert error_of(overrides=["memory.check_interval=0"]) == (
        "config: memory.check_interval: must be more than 0, got 0.0"
    )


def test_every_error_is_reported_in_one_config_error() -> None:
    message = error_of(
        overrides=["broker.graceful_timeout=x", "auth.default_user=1", "mqtt.port=no"],
        plugin_sections=SECTIONS,
    )
    assert "broker.graceful_timeout" in message
    assert "mqtt.port" in message
    assert "auth.default_user" not in message  # "1" is text for a string key


def test_a_section_of_an_installed_but_disabled_plugin_is_still_validated() -> None:
    message = error_of(
        overrides=['broker.plugins=["mqtt"]', "amqp.port=x"], plugin_sections=SECTIONS
    )
    assert "amqp.port: expected an integer" in message


def test_plugin_sections_cannot_take_a_core_name() -> None:
    assert "clash" in error_of(plugin_sections={"broker": MqttConfig})


def test_section_lookup() -> None:
    config = load_config(plugin_sections=SECTIONS)
    assert isinstance(config.section("amqp"), AmqpConfig)
    with pytest.raises(KeyError, match="amqp, mqtt"):
        config.section("stomp")


# -- memory watermark --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "stored", "in_bytes"),
    [
        ("40%", 0.4, 400),
        (0.4, 0.4, 400),
        (1, 1.0, 1000),
        ("100%", 1.0, 1000),
        ("512MiB", 512 * 2**20, 512 * 2**20),
        ("512 mib", 512 * 2**20, 512 * 2**20),
        ("2GB", 2 * 10**9, 2 * 10**9),
        ("2G", 2 * 2**30, 2 * 2**30),
        ("1.5GiB", 1.5 * 2**30, 3 * 2**29),
        ("64kB", 64000, 64000),
        (1073741824, 2**30, 2**30),
    ],
)
def test_watermark_forms(value: object, stored: float, in_bytes: int) -> None:
    config = load_config(data={"memory": {"high_watermark": value}})
    assert config.memory.high_watermark == stored
    assert config.memory.high_watermark_bytes(total_ram=1000) == in_bytes


@pytest.mark.parametrize("value", ["0%", "150%", "abc", "12 parsecs", -1, 0, 1.5, "1B", True, []])
def test_bad_watermarks_name_the_key(value: object) -> None:
    message = error_of(data={"memory": {"high_watermark": value}})
    assert message.startswith("config: memory.high_watermark: ")


@given(
    number=st.integers(min_value=2, max_value=10**12),
    unit=st.sampled_from(["B", "KiB", "MiB", "GiB", "TiB", "K", "M", "G", "kB", "MB", "GB"]),
)
def test_sizes_in_units_are_whole_bytes(number: int, unit: str) -> None:
    factors = {"B": 1, "K": 2**10, "M": 2**20, "G": 2**30, "kB": 10**3, "MB": 10**6, "GB": 10**9}
    factors.update({"KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40})
    stored = parse_watermark(f"{number}{unit}")
    assert MemorySection(high_watermark=stored).high_watermark_bytes(1) == number * factors[unit]


@given(percent=st.integers(min_value=1, max_value=100), ram=st.integers(0, 2**45))
def test_percent_is_a_fraction_of_ram(percent: int, ram: int) -> None:
    memory = MemorySection(high_watermark=parse_watermark(f"{percent}%"))
    assert memory.high_watermark_bytes(ram) == int(ram * (percent / 100))
    assert memory.high_watermark_bytes(ram) <= ram


# -- secrets -----------------------------------------------------------------------------------


def test_repr_hides_the_default_password() -> None:
    config = load_config(overrides=["auth.default_password=s3cr3t-pw"])
    assert config.auth.default_password == "s3cr3t-pw"
    assert "s3cr3t-pw" not in repr(config)
    assert "s3cr3t-pw" not in repr(config.auth)
    assert "default_password=" in repr(AuthSection())
