"""Configuration: the model, AMQP URIs, the JSON file's parsing and validation.

Imports nothing of pumpd's other layers. See docs/architecture.md.
"""

from .amqp10_uri import parse_amqp10_uri
from .model import Amqp10URI, BrokerURI, Declaration, Protocol, PumpConfig, ShovelConfig
from .parse import ConfigError, load_config, parse_config
from .uri import URIError, parse_uri, redact

__all__ = [
    "Amqp10URI",
    "BrokerURI",
    "ConfigError",
    "Declaration",
    "Protocol",
    "PumpConfig",
    "ShovelConfig",
    "URIError",
    "load_config",
    "parse_amqp10_uri",
    "parse_config",
    "parse_uri",
    "redact",
]
