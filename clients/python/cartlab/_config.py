"""The client config, resolved exactly as the `cart` CLI resolves it (rpc/client_config.h):
arguments, then CART_SERVER / CART_TOKEN / CART_TLS_CA, then the client config file
($CART_CONFIG, else ~/.config/cart/client.yaml; written by `cart up`)."""

from __future__ import annotations

import dataclasses
import os
from typing import Optional

import yaml

from ._errors import ConfigError

KEYS = ("server", "token", "tls_ca", "tls_server_name")


@dataclasses.dataclass
class ClientConfig:
    server: str = "127.0.0.1:7070"  # host:port of cartd
    token: str = ""  # bearer token; empty: none (loopback without tokens)
    tls_ca: str = ""  # PEM file of the CA that signed cartd's certificate; empty: plaintext
    tls_server_name: str = ""  # override of the certificate's host name


def default_config_path() -> str:
    path = os.environ.get("CART_CONFIG")
    if path:
        return path
    return os.path.join(os.environ.get("HOME", "."), ".config", "cart", "client.yaml")


def parse_client_config(text: str, path: str) -> ClientConfig:
    """A client config file's text; ConfigError "<path>:<line>: ..." naming the problem."""
    config = ClientConfig()
    try:
        root = yaml.compose(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        line = f":{mark.line + 1}" if mark is not None else ""
        raise ConfigError(f"{path}{line}: {getattr(e, 'problem', None) or e}") from None
    if root is None:
        return config
    if not isinstance(root, yaml.MappingNode):
        raise ConfigError(f"{path}: a client config is a map of {', '.join(KEYS)}")
    for key_node, value_node in root.value:
        key, line = key_node.value, key_node.start_mark.line + 1
        if not isinstance(value_node, yaml.ScalarNode):
            raise ConfigError(f"{path}:{line}: {key}: expected a single value")
        if key not in KEYS:
            raise ConfigError(f"{path}:{line}: unknown key '{key}' (known: {', '.join(KEYS)})")
        setattr(config, key, value_node.value)
    return config


def resolve(server: Optional[str] = None, token: Optional[str] = None,
            config: Optional[str] = None, tls_ca: Optional[str] = None,
            tls_server_name: Optional[str] = None) -> ClientConfig:
    """Arguments over the environment over the file (a missing file is fine)."""
    path = config if config is not None else default_config_path()
    resolved = ClientConfig()
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            resolved = parse_client_config(f.read(), path)
    for key, env in (("server", "CART_SERVER"), ("token", "CART_TOKEN"), ("tls_ca", "CART_TLS_CA")):
        if os.environ.get(env):
            setattr(resolved, key, os.environ[env])
    for key, value in (("server", server), ("token", token), ("tls_ca", tls_ca),
                       ("tls_server_name", tls_server_name)):
        if value:
            setattr(resolved, key, value)
    return resolved
