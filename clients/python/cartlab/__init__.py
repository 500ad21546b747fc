"""cartlab: CART Lab from Python (docs/python.md).

    import cartlab
    lab = cartlab.connect()                  # the `cart` CLI's config: flags > env > file
    runs = lab.runs(sweep="stage1")          # one row per run: state, config keys, latest.<metric>
    loss = lab.history(runs, ["loss"])       # every point: run_id, step, metric, value, wall_time
"""

from __future__ import annotations

from typing import Optional

from ._config import ClientConfig, default_config_path, parse_client_config, resolve
from ._errors import CartError, ConfigError

__all__ = ["connect", "open_db", "Client", "Database", "ClientConfig", "CartError", "ConfigError", "default_config_path",
           "parse_client_config"]
__version__ = "0.1.0"


def connect(server: Optional[str] = None, token: Optional[str] = None,
            config: Optional[str] = None, tls_ca: Optional[str] = None,
            tls_server_name: Optional[str] = None, timeout: float = 60.0) -> "Client":
    """A Client of the cartd the arguments, then CART_SERVER / CART_TOKEN / CART_TLS_CA, then the
    client config file (`config`, else $CART_CONFIG, else ~/.config/cart/client.yaml) name, in
    that order, as the `cart` CLI resolves them. Connecting is lazy: the first call reaches cartd
    (CartError UNAVAILABLE when it cannot)."""
    from ._client import Client

    return Client(resolve(server, token, config, tls_ca, tls_server_name), timeout=timeout)


def open_db(path: str) -> "Database":
    """A cartd's database file (its data_dir's cart.db), read-only and without the daemon:
    sweeps(), runs(), history() and metric_names() as `connect()` gives them; table() and report()
    through `cart results --db` and `cart report --db`. Changes and downsampled histories need
    cartd (they raise CartError FAILED_PRECONDITION)."""
    from ._db import Database

    return Database(path)


def __getattr__(name: str):
    if name == "Client":
        from ._client import Client

        return Client
    if name == "Database":
        from ._db import Database

        return Database
    raise AttributeError(name)
