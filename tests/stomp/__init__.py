"""Tests of the STOMP plugin."""
