"""What every collector module shares: the kinds of platform collectors and the errors."""

PROCESS_KINDS = ("tegrastats", "iostat", "powermetrics")  # runner.collectors.tools
THREAD_KINDS = ("vmstat", "psi", "thermal", "power", "rapl", "hwmon", "vm_stat", "jtop")  # snapshots, jetson_stats
KINDS = PROCESS_KINDS + THREAD_KINDS


class CollectorError(Exception):
    """A collector the run needs cannot run: the run fails before its step starts."""


class Unavailable(Exception):
    """This collector cannot run on this machine; the message says why."""
