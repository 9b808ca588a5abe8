"""One exception tree; every message is written for the person running the harness.

The CLI prints ``str(error)`` on one line and exits with ``error.exit_code``; a traceback is
shown only with ``--debug``.
"""

from __future__ import annotations


class HarnessError(Exception):
    """Base of every error the harness reports to its user."""

    exit_code = 1


class UsageError(HarnessError):
    """Bad input from the user: a file, a flag, a name. Exit code 2."""

    exit_code = 2


class ConfigError(UsageError):
    """An experiment or target YAML file is wrong; names file, line and field."""

    def __init__(self, message: str, *, file: str | None = None, line: int | None = None,
                 field: str | None = None) -> None:
        self.file, self.line, self.field = file, line, field
        where = file or "<config>"
        if line is not None:
            where = f"{where}:{line}"
        prefix = f"{where}: " + (f"{field}: " if field else "")
        super().__init__(prefix + message)


class ToolMissingError(UsageError):
    """A required program (fio, make, a C compiler) is not installed where it is needed."""


class TargetError(HarnessError):
    """A target cannot be reached or does not behave as its inventory says."""


class ExpectationError(HarnessError):
    """A board-state expectation failed (power mode, clocks, memory...)."""


class ResultSetError(UsageError):
    """A result set is missing, incomplete where it must be complete, or of another schema."""


class DiskFullError(UsageError):
    """A disk the harness writes to (results, scratch, a board's workdir) is full: which, how much is free,
    and how to go on."""


class EmulationError(UsageError):
    """The machine does not allow the requested board emulation; the run is refused."""


class InfrastructureError(HarnessError):
    """The measurement could not be made or trusted for a reason that is not the metric: a set incomplete, a run
    failed, died or was interrupted, a board unreachable, a lease lost. Exit code 3, so a CI gate never reads a
    dead board as a regression (exit 1) nor as a pass (exit 0)."""

    exit_code = 3
