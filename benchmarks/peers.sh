#!/bin/sh
# The peer brokers herald is compared with, installed and started on loopback ports
# (issue 9): RabbitMQ with its MQTT and STOMP plugins, Mosquitto, amqtt.
#
#     sh benchmarks/peers.sh [start|stop|status]      (as root; start is the default)
#
# Ports (benchmarks/suite.py's defaults), chosen so herald's own defaults stay free:
#     RabbitMQ  AMQP 5673, MQTT 1884, STOMP 61614
#     Mosquitto MQTT 1886
#     amqtt     MQTT 1885
# RabbitMQ and Mosquitto come from Debian (apt-get), amqtt from PyPI into its own virtualenv
# (/opt/amqtt-venv: its pinned dependencies must not meet herald's). Every setting other than
# the ports is the package's default, except Mosquitto's: no persistence, queues deep enough
# for the benchmarks, TCP_NODELAY as the other brokers. Nothing here is used by the tests.
set -eu

AMQTT_VERSION=0.12.1
RUN=/var/tmp/herald-peers
mkdir -p "$RUN"

install() {
    if ! command -v rabbitmq-server >/dev/null || ! command -v mosquitto >/dev/null; then
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq rabbitmq-server mosquitto >/dev/null
    fi
    if [ ! -x /opt/amqtt-venv/bin/amqtt ]; then
        python3 -m venv /opt/amqtt-venv
        /opt/amqtt-venv/bin/pip install -q "amqtt==$AMQTT_VERSION"
    fi
}

configure() {
    mkdir -p /etc/rabbitmq
    cat >/etc/rabbitmq/rabbitmq.conf <<EOF
listeners.tcp.default = 5673
mqtt.listeners.tcp.default = 1884
stomp.listeners.tcp.1 = 61614
EOF
    rabbitmq-plugins enable --offline rabbitmq_mqtt rabbitmq_stomp >/dev/null
    cat >"$RUN/mosquitto.conf" <<EOF
listener 1886 127.0.0.1
allow_anonymous true
persistence false
max_queued_messages 100000
max_inflight_messages 20
set_tcp_nodelay true
EOF
    cat >"$RUN/amqtt.yaml" <<EOF
---
listeners:
  default:
    type: tcp
    bind: 127.0.0.1:1885
plugins:
  amqtt.plugins.authentication.AnonymousAuthPlugin:
    allow_anonymous: true
EOF
}

listening() {
    ss -ltn "sport = :$1" | grep -q LISTEN
}

wait_for() {
    for _ in $(seq 120); do
        listening "$1" && return 0
        sleep 0.5
    done
    echo "peers.sh: nothing listens on port $1 after 60 s" >&2
    return 1
}

start() {
    install
    configure
    if ! listening 5673; then
        su rabbitmq -s /bin/sh -c "rabbitmq-server -detached"
    fi
    if ! listening 1886; then
        mosquitto -d -c "$RUN/mosquitto.conf"
    fi
    if ! listening 1885; then
        nohup /opt/amqtt-venv/bin/amqtt -c "$RUN/amqtt.yaml" >"$RUN/amqtt.log" 2>&1 &
        echo $! >"$RUN/amqtt.pid"
    fi
    for port in 5673 1884 61614 1886 1885; do wait_for "$port"; done
    status
}

stop() {
    su rabbitmq -s /bin/sh -c "rabbitmqctl stop" >/dev/null 2>&1 || true
    pkill -x mosquitto || true
    if [ -f "$RUN/amqtt.pid" ]; then kill "$(cat "$RUN/amqtt.pid")" 2>/dev/null || true; fi
}

status() {
    rabbit=$(dpkg-query -W -f '${Version}' rabbitmq-server 2>/dev/null || echo "?")
    mosq=$(dpkg-query -W -f '${Version}' mosquitto 2>/dev/null || echo "?")
    for port in 5673 1884 61614 1886 1885; do
        if listening "$port"; then state=up; else state=down; fi
        echo "port $port: $state"
    done
    echo "rabbitmq-server $rabbit, mosquitto $mosq, amqtt $AMQTT_VERSION"
}

case "${1:-start}" in
    start) start ;;
    stop) stop ;;
    status) status ;;
    *) echo "usage: sh benchmarks/peers.sh [start|stop|status]" >&2; exit 2 ;;
esac
