"""SSH host keys: verified against known_hosts (an unknown key is an error, a changed key always one),
fetched and recorded only by ``harness targets trust``."""

from __future__ import annotations

import base64
import hashlib
from typing import Any


class UnknownHostKey(Exception):
    def __init__(self, hostname: str, key: Any) -> None:
        super().__init__(hostname)
        self.hostname, self.key = hostname, key


def fingerprint(key: Any) -> str:
    """OpenSSH's SHA256 fingerprint of a paramiko key."""
    return "SHA256:" + base64.b64encode(hashlib.sha256(key.asbytes()).digest()).decode().rstrip("=")


def reject_policy() -> Any:
    from paramiko import MissingHostKeyPolicy

    class Reject(MissingHostKeyPolicy):
        def missing_host_key(self, client: Any, hostname: str, key: Any) -> None:
            raise UnknownHostKey(hostname, key)

    return Reject()


def ssh_exception() -> type[Exception]:
    from paramiko import SSHException

    return SSHException
