"""A GGUF header parser that reads the metadata and tensor table and nothing else.

gguf.GGUFReader memory-maps the whole file; faulting in the header pages then lets the kernel's mmap
read-around pull up to read_ahead_kb of *tensor data* into the page cache, which would perturb a cold-cache
measurement that follows. Here the file is read with pread() in small chunks after POSIX_FADV_RANDOM (no
readahead), so at most one chunk past the end of the header is ever read.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.models.errors import ModelError

GGUF_MAGIC = b"GGUF"
CHUNK = 16 * 1024  # small: the overshoot past the header end reads (at most) this much tensor data
DEFAULT_ALIGNMENT = 32

# GGUF metadata value types -> struct format (little-endian prefix added at use)
_SCALAR = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
_STRING, _ARRAY = 8, 9


@dataclass(frozen=True)
class RawTensor:
    name: str
    ne: tuple[int, ...]   # GGUF order: ne[0] fastest-varying
    ggml_type: int
    offset: int           # relative to the start of the tensor data section


@dataclass
class Header:
    version: int
    byte_order: str                  # "<" or ">"
    kv: dict[str, Any]               # arrays of > 64 items are replaced by {"array": type, "n": count}
    kv_types: dict[str, tuple[int, int | None]]  # key -> (GGUF value type, array item type)
    tensors: list[RawTensor]
    alignment: int
    data_offset: int                 # absolute file offset of the tensor data section
    header_bytes_read: int           # how much of the file this parser read


class _Reader:
    def __init__(self, fd: int, size: int, full_arrays: bool) -> None:
        self.fd, self.size, self.full_arrays = fd, size, full_arrays
        self.buf = bytearray()
        self.pos = 0
        self.bo = "<"

    def _need(self, n: int) -> None:
        while self.pos + n > len(self.buf):
            if len(self.buf) >= self.size:
                raise ModelError("truncated GGUF header")
            want = max(CHUNK, self.pos + n - len(self.buf))
            chunk = os.pread(self.fd, want, len(self.buf))
            if not chunk:
                raise ModelError("truncated GGUF header")
            self.buf += chunk

    def take(self, n: int) -> bytes:
        self._need(n)
        b = bytes(self.buf[self.pos:self.pos + n])
        self.pos += n
        return b

    def scalar(self, fmt: str) -> Any:
        size = struct.calcsize(fmt)
        return struct.unpack(self.bo + fmt, self.take(size))[0]

    def string(self) -> str:
        n = self.scalar("Q")
        if n > self.size:
            raise ModelError("corrupt GGUF header (string longer than the file)")
        return self.take(n).decode("utf-8", errors="replace")

    def skip_strings(self, n: int) -> None:
        fmt = self.bo + "Q"
        for _ in range(n):
            self._need(8)
            length = struct.unpack_from(fmt, self.buf, self.pos)[0]
            if length > self.size:
                raise ModelError("corrupt GGUF header (string longer than the file)")
            self._need(8 + length)
            self.pos += 8 + length

    def value(self, vtype: int) -> Any:
        if vtype in _SCALAR:
            return self.scalar(_SCALAR[vtype])
        if vtype == _STRING:
            return self.string()
        if vtype == _ARRAY:
            sub, n = self.scalar("I"), self.scalar("Q")
            if n > self.size:
                raise ModelError("corrupt GGUF header (array longer than the file)")
            if sub in _SCALAR:  # fixed-size items: skip or unpack in one go
                fmt = _SCALAR[sub]
                raw = self.take(n * struct.calcsize(fmt))
                if n > 64 and not self.full_arrays:
                    return {"array": sub, "n": n}
                return list(struct.unpack(f"{self.bo}{n}{fmt}", raw))
            if sub == _STRING and n > 64 and not self.full_arrays:
                self.skip_strings(n)  # tokenizer vocabularies: 100k+ strings nobody asked for
                return {"array": sub, "n": n}
            items = [self.value(sub) for _ in range(n)]
            return items if n <= 64 or self.full_arrays else {"array": sub, "n": n}
        raise ModelError(f"corrupt GGUF header (unknown value type {vtype})")


def read_header(path: Path, *, full_arrays: bool = False) -> Header:
    """Parse the header; ``full_arrays`` keeps every array item (e.g. to copy a tokenizer)."""
    path = Path(path)
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        raise ModelError(f"model file {path} does not exist") from None
    except OSError as e:
        raise ModelError(f"cannot open model file {path}: {e.strerror}") from None
    try:
        size = os.fstat(fd).st_size
        if hasattr(os, "posix_fadvise"):
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
        r = _Reader(fd, size, full_arrays)
        if size < 24 or r.take(4) != GGUF_MAGIC:
            raise ModelError(f"{path} is not a GGUF file (no GGUF magic)")
        version = r.scalar("I")
        if version & 0xFFFF == 0 and version > 0xFFFF:  # written big-endian
            r.bo = ">"
            version = struct.unpack(">I", struct.pack("<I", version))[0]
        if version not in (2, 3):
            raise ModelError(f"{path}: unsupported GGUF version {version} (2 and 3 are supported)")
        n_tensors, n_kv = r.scalar("Q"), r.scalar("Q")
        kv: dict[str, Any] = {}
        kv_types: dict[str, tuple[int, int | None]] = {}
        for _ in range(n_kv):
            key = r.string()
            vtype = r.scalar("I")
            sub = None
            if vtype == _ARRAY:  # peek the item type; value() reads it again
                sub = struct.unpack(r.bo + "I", r.take(4))[0]
                r.pos -= 4
            kv[key] = r.value(vtype)
            kv_types[key] = (vtype, sub)
        tensors = []
        for _ in range(n_tensors):
            name = r.string()
            n_dims = r.scalar("I")
            ne = tuple(r.scalar("Q") for _ in range(n_dims))
            ggml_type, offset = r.scalar("I"), r.scalar("Q")
            tensors.append(RawTensor(name, ne, ggml_type, offset))
        alignment = kv.get("general.alignment", DEFAULT_ALIGNMENT)
        if not isinstance(alignment, int) or alignment <= 0:
            raise ModelError(f"{path}: bad general.alignment {alignment!r}")
        data_offset = -(-r.pos // alignment) * alignment
        return Header(version=version, byte_order=r.bo, kv=kv, kv_types=kv_types, tensors=tensors,
                      alignment=alignment, data_offset=data_offset, header_bytes_read=len(r.buf))
    except struct.error:
        raise ModelError(f"{path}: corrupt GGUF header") from None
    finally:
        os.close(fd)
