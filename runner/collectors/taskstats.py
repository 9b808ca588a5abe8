"""Per-thread delay accounting through the kernel's taskstats generic-netlink family (linux/taskstats.h).

A request is a netlink message of the family "TASKSTATS" (its id resolved once with CTRL_CMD_GETFAMILY) carrying
TASKSTATS_CMD_GET with TASKSTATS_CMD_ATTR_PID = a thread id; the reply nests TASKSTATS_TYPE_AGGR_PID ->
(TASKSTATS_TYPE_PID, TASKSTATS_TYPE_STATS = struct taskstats). It needs CAP_NET_ADMIN (root).

``struct taskstats`` only ever grows at its end (the header's rule), so a field's offset is the same in every
version that has it; a field is read only when the kernel's struct is long enough to hold it. Offsets are those of
linux/taskstats.h (version 13 and later; the fields read here all date from version 9 or earlier).

Requests for many threads go out in one datagram (netlink handles each message of a datagram in turn): one
sendto and one recv per thread keep a read of 16 threads well under a millisecond.
"""

import errno
import os
import socket
import struct

NETLINK_GENERIC = 16
GENL_ID_CTRL = 0x10
CTRL_CMD_GETFAMILY = 3
CTRL_ATTR_FAMILY_ID = 1
CTRL_ATTR_FAMILY_NAME = 2
NLM_F_REQUEST = 1
NLMSG_ERROR = 2
NLMSG_DONE = 3
TASKSTATS_CMD_GET = 1
TASKSTATS_CMD_ATTR_PID = 1
TASKSTATS_TYPE_PID = 1
TASKSTATS_TYPE_STATS = 3
TASKSTATS_TYPE_AGGR_PID = 4
NLMSG_HEADER = struct.Struct("=IHHII")  # len, type, flags, seq, port id
GENL_HEADER = struct.Struct("=BBH")  # cmd, version, reserved
NLA_HEADER = struct.Struct("=HH")  # len, type
NLA_TYPE_MASK = 0x3FFF  # without NLA_F_NESTED / NLA_F_NET_BYTEORDER

# field -> byte offset in struct taskstats (all u64, nanoseconds unless named otherwise)
FIELDS = {
    "cpu_count": 16, "cpu_delay_total": 24,  # runnable, waiting for a CPU (= schedstat's run_delay)
    "blkio_count": 32, "blkio_delay_total": 40,  # sleeping in io_schedule: block I/O, page-cache reads and faults
    "swapin_count": 48, "swapin_delay_total": 56,
    "cpu_run_real_total": 64,  # on CPU: utime + stime, tick-sampled on most kernels (schedstat's is exact)
    # (cpu_run_virtual_total at 72 is se.sum_exec_runtime, schedstat's exact on-CPU ns, and cpu_count at 16 its
    # timeslices: runner/native/counters.c takes all three schedstat numbers from here)
    "ac_utime_us": 152, "ac_stime_us": 160, "ac_minflt": 168, "ac_majflt": 176,
    "nvcsw": 272, "nivcsw": 280,
    "freepages_count": 312, "freepages_delay_total": 320,  # direct reclaim
    "thrashing_count": 328, "thrashing_delay_total": 336,  # waiting for a refault of an evicted page-cache page
    "compact_count": 352, "compact_delay_total": 360,  # direct compaction
}
U64 = struct.Struct("=Q")


class TaskstatsError(Exception):
    """The taskstats interface cannot be used here; the message says why."""


def _attr(kind, payload):
    size = NLA_HEADER.size + len(payload)
    return NLA_HEADER.pack(size, kind) + payload + b"\0" * ((4 - size % 4) % 4)


def message(msg_type, cmd, attrs, seq, version=1):
    """One generic-netlink request: nlmsghdr, genlmsghdr, attributes."""
    body = GENL_HEADER.pack(cmd, version, 0) + b"".join(attrs)
    return NLMSG_HEADER.pack(NLMSG_HEADER.size + len(body), msg_type, NLM_F_REQUEST, seq, 0) + body


def attributes(data, offset=0, end=None):
    """{type: payload bytes} of the netlink attributes in ``data[offset:end]`` (a later duplicate wins)."""
    end = len(data) if end is None else end
    out = {}
    while offset + NLA_HEADER.size <= end:
        size, kind = NLA_HEADER.unpack_from(data, offset)
        if size < NLA_HEADER.size or offset + size > end:
            raise ValueError("netlink attribute of length %d at byte %d overruns the message" % (size, offset))
        out[kind & NLA_TYPE_MASK] = data[offset + NLA_HEADER.size:offset + size]
        offset += (size + 3) & ~3
    return out


def messages(data):
    """(type, seq, payload after the netlink header) of each netlink message in one datagram."""
    offset = 0
    while offset + NLMSG_HEADER.size <= len(data):
        size, msg_type, _flags, seq, _port = NLMSG_HEADER.unpack_from(data, offset)
        if size < NLMSG_HEADER.size or offset + size > len(data):
            raise ValueError("netlink message of length %d at byte %d overruns the datagram" % (size, offset))
        yield msg_type, seq, data[offset + NLMSG_HEADER.size:offset + size]
        offset += (size + 3) & ~3


def _layout(fields):
    """One Struct reading every field of ``fields`` (name -> offset of a u64) in a single unpack."""
    fmt, at = "=", 0
    for offset in sorted(fields.values()):
        fmt += ("%dx" % (offset - at) if offset > at else "") + "Q"
        at = offset + 8
    return struct.Struct(fmt), sorted(fields, key=fields.get)


LAYOUT, LAYOUT_NAMES = _layout(FIELDS)


def parse_stats(struct_bytes):
    """struct taskstats -> {"version": n, "size": bytes, field: value or None when this kernel's struct lacks it}."""
    if len(struct_bytes) < 2:
        raise ValueError("taskstats struct of %d bytes" % len(struct_bytes))
    out = {"version": struct.unpack_from("=H", struct_bytes, 0)[0], "size": len(struct_bytes)}
    if len(struct_bytes) >= LAYOUT.size:  # every field there: one unpack (a read of 16 threads stays cheap)
        out.update(zip(LAYOUT_NAMES, LAYOUT.unpack_from(struct_bytes, 0)))  # noqa: B905 - Python 3.8
        return out
    for name, offset in FIELDS.items():
        out[name] = U64.unpack_from(struct_bytes, offset)[0] if offset + 8 <= len(struct_bytes) else None
    return out


def parse_reply(payload):
    """A TASKSTATS_CMD_GET reply's payload (after the netlink header) -> (tid, parsed stats)."""
    top = attributes(payload, GENL_HEADER.size)
    if TASKSTATS_TYPE_AGGR_PID not in top:
        raise ValueError("taskstats reply without TASKSTATS_TYPE_AGGR_PID (attributes %s)" % sorted(top))
    nested = attributes(top[TASKSTATS_TYPE_AGGR_PID])
    if TASKSTATS_TYPE_PID not in nested or TASKSTATS_TYPE_STATS not in nested:
        raise ValueError("taskstats reply without pid or stats (attributes %s)" % sorted(nested))
    return struct.unpack_from("=I", nested[TASKSTATS_TYPE_PID])[0], parse_stats(nested[TASKSTATS_TYPE_STATS])


def _error_code(payload):
    return -struct.unpack_from("=i", payload, 0)[0] if len(payload) >= 4 else errno.EIO


class Taskstats:
    """A generic-netlink socket bound to the TASKSTATS family; ``read(tids)`` -> {tid: stats}."""

    def __init__(self):
        try:
            self.sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_GENERIC)
        except (OSError, AttributeError) as exc:  # AttributeError: no AF_NETLINK (macOS)
            raise TaskstatsError("no generic netlink socket: %s" % exc) from None
        self.sock.settimeout(1.0)
        self.sock.bind((0, 0))
        self.seq = 0
        self.buffer = bytearray(65536)
        self.family = self._family_id()

    def close(self):
        self.sock.close()

    def _family_id(self):
        name = _attr(CTRL_ATTR_FAMILY_NAME, b"TASKSTATS\0")
        self.sock.send(message(GENL_ID_CTRL, CTRL_CMD_GETFAMILY, [name], 1))
        for msg_type, _seq, payload in messages(self.sock.recv(65536)):
            if msg_type == NLMSG_ERROR and _error_code(payload):
                raise TaskstatsError("no TASKSTATS netlink family: %s" % os.strerror(_error_code(payload)))
            found = attributes(payload, GENL_HEADER.size).get(CTRL_ATTR_FAMILY_ID)
            if found:
                return struct.unpack_from("=H", found)[0]
        raise TaskstatsError("no TASKSTATS netlink family in the controller's reply")

    def request(self, tids):
        """One datagram asking for every tid of ``tids``; returns the sequence number of the first."""
        first = self.seq + 1
        out = []
        for tid in tids:
            self.seq += 1
            out.append(message(self.family, TASKSTATS_CMD_GET,
                               [_attr(TASKSTATS_CMD_ATTR_PID, struct.pack("=I", tid))], self.seq))
        self.sock.send(b"".join(out))
        return first

    def read(self, tids):
        """{tid: stats} for the threads of ``tids`` still alive (a gone thread answers ESRCH: left out).

        PermissionError when the caller may not ask (CAP_NET_ADMIN).
        """
        if not tids:
            return {}
        first = self.request(tids)
        out, answered = {}, 0
        while answered < len(tids):
            size = self.sock.recv_into(self.buffer)
            for msg_type, seq, payload in messages(memoryview(self.buffer)[:size].tobytes()):
                if seq < first:
                    continue  # a late answer to an earlier read that timed out
                answered += 1
                if msg_type == NLMSG_ERROR:
                    code = _error_code(payload)
                    if code == errno.EPERM:
                        raise PermissionError("taskstats: %s (needs CAP_NET_ADMIN)" % os.strerror(code))
                    continue  # ESRCH: the thread exited since the list was read
                if msg_type != NLMSG_DONE:
                    tid, stats = parse_reply(payload)
                    out[tid] = stats
        return out


def open_taskstats():
    """(a Taskstats client that answered for this process, None) or (None, why taskstats cannot be used)."""
    try:
        client = Taskstats()
    except (TaskstatsError, OSError) as exc:
        return None, str(exc)
    try:
        client.read([os.getpid()])
    except (PermissionError, OSError, ValueError) as exc:
        client.close()
        return None, "taskstats: %s" % exc
    return client, None

