"""Helpers the test modules import: AMQP clients, daemon runners, Spark sessions, crafted frames."""
