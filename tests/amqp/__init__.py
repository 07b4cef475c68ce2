"""Tests of the AMQP 0-9-1 codec (plugins/amqp/codec)."""
