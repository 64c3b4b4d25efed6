"""Configuration: the model, AMQP URIs, the JSON file's parsing and validation.

Imports nothing of pumpd's other layers. See docs/architecture.md.
"""

from .model import BrokerURI, Declaration, PumpConfig, ShovelConfig
from .parse import ConfigError, load_config, parse_config
from .uri import URIError, parse_uri, redact

__all__ = [
    "BrokerURI",
    "ConfigError",
    "Declaration",
    "PumpConfig",
    "ShovelConfig",
    "URIError",
    "load_config",
    "parse_config",
    "parse_uri",
    "redact",
]
