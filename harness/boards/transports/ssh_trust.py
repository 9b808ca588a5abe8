"""``harness targets trust``: connect far enough to see a board's host key, show it, record it."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

from harness.boards.transports.ssh_connection import SshConnection, SshOptions
from harness.boards.transports.ssh_hostkeys import UnknownHostKey, fingerprint, ssh_exception
from harness.errors import TargetError


def fetch_host_key(target: Any) -> tuple[str, Any, Path, bool]:
    """Connect far enough to see the server's host key: (known_hosts entry, key, file, already known)."""
    from paramiko import AuthenticationException, BadHostKeyException, MissingHostKeyPolicy

    link = SshConnection(getattr(target, "name", "?"), SshOptions.model_validate(target.transport_options))
    conn = link.connection()
    seen: dict[str, Any] = {}

    class Capture(MissingHostKeyPolicy):
        def missing_host_key(self, client: Any, hostname: str, key: Any) -> None:
            seen["entry"], seen["key"] = hostname, key
            raise UnknownHostKey(hostname, key)

    conn.client.set_missing_host_key_policy(Capture())
    entry = conn.host if conn.port == 22 else f"[{conn.host}]:{conn.port}"
    try:
        conn.open()
    except UnknownHostKey:
        return seen["entry"], seen["key"], link.known_hosts, False
    except BadHostKeyException as exc:
        raise TargetError(f"target {link.target_name}: HOST KEY CHANGED for {exc.hostname} (known "
                          f"{fingerprint(exc.expected_key)}, offered {fingerprint(exc.key)}); refusing to trust it; "
                          f"remove the old key first: ssh-keygen -f {link.known_hosts} -R "
                          f"{shlex.quote(exc.hostname)}") from None
    except AuthenticationException:
        pass  # the host key was checked (and known) before authentication
    except (OSError, ssh_exception()) as exc:
        conn.close()
        raise TargetError(f"target {link.target_name}: cannot reach {link.options.host}: {exc}") from None
    try:
        paramiko_transport = conn.client.get_transport()
        return entry, paramiko_transport.get_remote_server_key(), link.known_hosts, True
    finally:
        conn.close()


def add_known_host(path: Path, entry: str, key: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    with path.open("a") as out:
        out.write(f"{entry} {key.get_name()} {key.get_base64()}\n")
