"""Which process a recorded pid names, asked on the target, right before it is signalled.

A pid in a manifest outlives its process: once the runner is gone (killed, or the board rebooted) the same number
can name an unrelated process, and ``--resume`` used to SIGTERM and SIGKILL that one. So a runner is recorded with
its identity, read on the target just after it started: its start time (field 22 of /proc/PID/stat, clock ticks
since boot) and the boot id (/proc/sys/kernel/random/boot_id); on macOS, which has no /proc, ps's start time and
kern.boottime. Whether the recorded runner still runs and every signal to it go through one POSIX shell script on
the target that compares the process now at the pid with the record, and with a marker its command line must
contain (the run's spec path: it also identifies a runner recorded by an older harness, without an identity).
The comparison and the kill run in the same shell, where the process is: no pid is signalled on its own say-so.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

SAME, GONE, OTHER = "same", "gone", "other"  # the recorded process runs | nothing runs at its pid | another does
# recorded when the process had already ended when it was identified: no live process matches it
VANISHED = "-"

# $1 op (identify | check | signal), $2 pid, $3 the recorded identity ("" for none), $4 a marker the command line
# must contain ("" for none), $5 the signal. Exit 0: it is the recorded process (and signalled); 1: nothing (but a
# zombie) at the pid; 3: another process.
SCRIPT = r"""
op=$1 pid=$2 want=$3 marker=$4 sig=$5
ident() {
  if [ -r "/proc/$pid/stat" ]; then
    s=$(cat "/proc/$pid/stat" 2>/dev/null) || return 1
    s=${s##*") "}
    set -- $s
    [ "$1" != Z ] && [ -n "${20}" ] || return 1
    printf '%s@%s\n' "${20}" "$(cat /proc/sys/kernel/random/boot_id 2>/dev/null)"
  else
    t=$(ps -o lstart= -p "$pid" 2>/dev/null) && [ -n "$t" ] || return 1
    printf '%s@%s\n' "$(echo $t)" "$(sysctl -n kern.boottime 2>/dev/null)"
  fi
}
cmdline() {
  if [ -r "/proc/$pid/cmdline" ]; then tr '\000' ' ' < "/proc/$pid/cmdline"; else ps -o command= -p "$pid"; fi
}
now=$(ident) || exit 1
if [ "$op" = identify ]; then echo "$now"; exit 0; fi
if [ -n "$want" ] && [ "$now" != "$want" ]; then exit 3; fi
if [ -n "$marker" ]; then
  # A process in the middle of execve reads an empty command line for a moment (its new memory holds no arguments
  # yet): a runner signalled right after it started. Ask again for up to a second before calling it another.
  args=$(cmdline); n=0
  while [ -z "$args" ] && [ $n -lt 20 ]; do sleep 0.05 2>/dev/null || sleep 1; n=$((n + 1)); args=$(cmdline); done
  case "$args" in *"$marker"*) ;; *) exit 3 ;; esac
fi
if [ "$op" = signal ]; then kill -"$sig" "$pid" 2>/dev/null || exit 1; fi
exit 0
"""
_VERDICTS = {0: SAME, 1: GONE, 3: OTHER}


def argv(op: str, pid: int, identity: str | None = None, marker: str | None = None, signum: int = 0) -> list[str]:
    """The script as an argument list (every transport quotes it as one)."""
    return ["sh", "-c", SCRIPT, "sh", op, str(int(pid)), identity or "", marker or "", str(int(signum))]


class RecordedProcesses:
    """``identify``, ``check`` and ``signal_recorded`` through the target's POSIX shell, for every transport."""

    def run(self, argv: Sequence[str], *, cwd: str | None = None, env: dict[str, str] | None = None,
            timeout: float | None = None) -> Any:
        raise NotImplementedError

    def identify(self, pid: int) -> str | None:
        """The identity of the process at ``pid`` now, or None when nothing runs there."""
        done = self.run(argv("identify", pid))
        text = done.stdout.decode(errors="replace").strip()
        return text if done.returncode == 0 and text else None

    def check(self, pid: int, identity: str | None, marker: str | None) -> str:
        """SAME when the recorded process still runs at ``pid``, GONE when nothing does, OTHER when another does.
        ``identity`` None: the marker alone decides (a record without an identity)."""
        return _VERDICTS.get(self.run(argv("check", pid, identity, marker)).returncode, GONE)

    def signal_recorded(self, pid: int, signum: int, identity: str | None, marker: str | None) -> str:
        """Send ``signum`` to ``pid`` only if it is still the recorded process; what was found there."""
        return _VERDICTS.get(self.run(argv("signal", pid, identity, marker, signum)).returncode, GONE)
