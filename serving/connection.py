"""What every client and launcher of this package shares: the address a server is given by,
the connection (tritonclient imported only here, when a command needs it), the served model's
config, the one-line error a command stops with, the argument checks and free ports.

Nothing here imports TensorFlow or this project's training code: the clients run in
environments that hold tritonclient and numpy only (Triton's SDK container,
``scripts/triton_env.sh``'s).
"""
from __future__ import annotations

import argparse
import socket


class CommandError(Exception):
    """What stops a command of this package (a client, a server launcher), said in one line
    by its ``main``."""


def address(url: str, protocol: str) -> str:
    """``host:port`` as tritonclient takes it; ``http://host:port`` and ``grpc://host:port``
    are accepted (the scheme dropped), a port that is not a number is refused."""
    scheme, sep, rest = url.partition("://")
    if sep:
        if scheme not in ("http", "grpc"):
            raise CommandError(f"--url {url}: give host:port (a {scheme}:// address is not "
                               "supported)")
        url = rest.rstrip("/")
    host, _, port = url.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        default = 8001 if protocol == "grpc" else 8000
        raise CommandError(f"--url {url}: give host:port, the port a number (Triton's {protocol}"
                           f" port is {default} by default)")
    return url


def connect(url: str, protocol: str, command: str):
    """(tritonclient's module for ``protocol``, a client of the server at ``url``); a wrong
    address is refused before tritonclient is imported, a missing tritonclient says how
    ``command`` (``serving.image_client``) runs where it is."""
    where = address(url, protocol)
    try:
        if protocol == "grpc":
            import tritonclient.grpc as client
        else:
            import tritonclient.http as client
    except ImportError as e:
        raise CommandError(f"tritonclient is not installed here ({e.name}): run it with the "
                           "environment scripts/triton_env.sh makes (\"$(bash "
                           f"scripts/triton_env.sh)\" -m {command} ...), or pip install "
                           "'tritonclient[all]'") from None
    return client, client.InferenceServerClient(where)


def model_config(server, model: str, protocol: str) -> dict:
    """The model's config as the server serves it, a dict of either protocol."""
    config = server.get_model_config(model, as_json=True) if protocol == "grpc" else \
        server.get_model_config(model)
    return config.get("config", config)


def infer_input(client, name: str, data, dtype: str):
    """tritonclient's input ``name`` of ``client`` (its module, either protocol) holding the
    array ``data`` as Triton's ``dtype`` (``BYTES``, ``INT32``, ``FP32`` ...)."""
    tensor = client.InferInput(name, list(data.shape), dtype)
    tensor.set_data_from_numpy(data)
    return tensor


def error_line(e: Exception) -> str:
    """The first line of what a server or tritonclient answered, at most 300 characters."""
    text = str(e).strip() or type(e).__name__
    return text.splitlines()[0][:300]


def positive(text: str) -> int:
    """An argparse type: a whole number of at least 1."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def free_ports(n: int) -> list[int]:
    """``n`` TCP ports free on this host now (bound, read, released): a server started next
    binds them."""
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()
