"""AMQP 1.0 on the wire: its type system, frames and performatives, messages, and a client
connection (SASL, open, sessions, links) that the engine's AMQP 1.0 endpoints drive."""
