"""Tests that need no broker, no Spark JVM and no running daemon (``make test-fast``)."""
