"""TLS on the listen port, from `[tls]` (docs/security.md).

With `cert_file` and `key_file` the port speaks only TLS, to clients and peers alike, and
the member dials its peers over TLS, checking each one's certificate against `ca_file`
(the system's trusted CAs when empty) and the address it dials (the certificate must name
the host of each member's address in `_cluster`, as an IP or DNS name). TLS keeps the
traffic private and the member's identity checked; it does not replace the cluster
secret, which says who is a member. Contexts are built once, at start: a file that
cannot be read stops the start with a message naming the option.
"""

from __future__ import annotations

import ssl

from replicaset.config import Config, ConfigError

# A client that connects and never completes the handshake holds a connection this long at most.
HANDSHAKE_TIMEOUT_S = 10.0
# A client that sends nothing this long after it connected is no TLS client (whose hello
# goes out at once) but a plain iproto client waiting for a greeting that a TLS port never
# sends in plain text: it is closed then. Long enough for a member's dialing task to be
# held up by its busy event loop between the connect and the hello.
CLIENT_HELLO_WAIT_S = 2.0


def server_context(config: Config) -> ssl.SSLContext | None:
    """None: the port speaks plain iproto."""
    cert, key = config["tls.cert_file"], config["tls.key_file"]
    if not cert:
        return None
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(cert, key)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"[tls] cert_file {cert} / key_file {key}: cannot load them: {exc}") from exc
    return context


def client_context(config: Config) -> ssl.SSLContext | None:
    """How this member dials its peers; None: in plain iproto, as it serves."""
    if not config["tls.cert_file"]:
        return None
    ca = config["tls.ca_file"] or None
    try:
        context = ssl.create_default_context(cafile=ca)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"[tls] ca_file {ca}: cannot load it: {exc}") from exc
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    return context
