"""A drive's read throughput at any queue depth and request size, from a fio ladder (``harness.steps.fio``'s
jobs: 64 KiB at QD 1/2/4, 128 KiB at QD 8, 1 MiB sequential), for the decode estimate (``analysis.estimate``).

How a point between the rungs is read: by **bytes in flight** (queue depth x request size). By Little's law a
device's throughput is bytes in flight / latency, and an NVMe or UFS drive's latency grows slowly until it
saturates, so throughput rises with the bytes in flight and levels off; the seed's Orin ladder (64 KiB QD1 200,
QD2 465, QD4 778, 128 KiB QD8 1618, 1 MiB sequential 2515 MB/s; docs/methodology.md section 1, seed 000) is
monotonic in it (64, 128, 256, 1024, 4096 KiB in flight). Between two rungs the throughput is linear in bytes in
flight (the constant-latency reading of Little's law); rungs with equal bytes in flight are averaged; a rung
slower than a smaller one is raised to it (a deeper queue can be used as a shallower one: the curve is
isotonic). Beyond the ladder nothing is extrapolated: the throughput is clamped to the end rung and the result
says so (below the smallest rung the real figure is lower; above the largest, the drive is assumed saturated).

What this reading ignores: at equal bytes in flight small requests cost more per byte (command overhead, IOPS
limits), so many tiny requests are read as too fast; sequential rungs are read like random ones.

MB here is 10^6 bytes, as fio's MB/s.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

MB = 1_000_000


@dataclass(frozen=True)
class LadderPoint:
    """One fio job's result: its request size, its queue depth (iodepth x numjobs) and its read MB/s."""

    bs_bytes: int
    iodepth: float
    mb_s: float
    label: str = ""

    @property
    def inflight_bytes(self) -> float:
        return self.bs_bytes * self.iodepth

    def describe(self) -> str:
        return self.label or f"{self.bs_bytes // 1024} KiB QD{self.iodepth:g}"


@dataclass(frozen=True)
class Throughput:
    """The ladder read at one point: MB/s, the bytes in flight it was read at, and whether it was clamped."""

    mb_s: float
    inflight_bytes: float
    clamped: Literal["below", "above"] | None = None
    rung: str = ""  # the rung clamped to, when clamped


@dataclass(frozen=True)
class Ladder:
    points: tuple[LadderPoint, ...]
    source: str  # where it came from, as a sentence fragment ("fio in set X on target T", "--ladder")

    def __post_init__(self) -> None:
        if not self.points:
            raise ValueError("a fio ladder needs at least one point")
        for point in self.points:
            if point.bs_bytes <= 0 or point.iodepth <= 0 or point.mb_s <= 0:
                raise ValueError(f"ladder point {point.describe()}: block size, depth and MB/s must be positive")

    def curve(self) -> list[tuple[float, float, str]]:
        """(bytes in flight, MB/s, rung) in order: equal in-flight rungs averaged, then made non-decreasing."""
        grouped: dict[float, list[LadderPoint]] = {}
        for point in self.points:
            grouped.setdefault(point.inflight_bytes, []).append(point)
        out: list[tuple[float, float, str]] = []
        best = 0.0
        for inflight in sorted(grouped):
            same = grouped[inflight]
            best = max(best, sum(p.mb_s for p in same) / len(same))
            out.append((inflight, best, " = ".join(p.describe() for p in same)))
        return out

    def throughput(self, bs_bytes: float, iodepth: float) -> Throughput:
        """MB/s at ``iodepth`` requests of ``bs_bytes`` in flight (see the module text for how)."""
        inflight = bs_bytes * iodepth
        curve = self.curve()
        if inflight < curve[0][0]:
            return Throughput(curve[0][1], inflight, "below", curve[0][2])
        if inflight > curve[-1][0]:
            return Throughput(curve[-1][1], inflight, "above", curve[-1][2])
        for (x0, y0, _), (x1, y1, _) in zip(curve, curve[1:], strict=False):
            if x0 <= inflight <= x1:
                return Throughput(y0 + (y1 - y0) * (inflight - x0) / (x1 - x0), inflight)
        return Throughput(curve[0][1], inflight)  # one rung, read exactly at its bytes in flight

    def describe(self) -> str:
        rungs = ", ".join(f"{p.describe()} {p.mb_s:.0f}" for p in self.points)
        return f"{rungs} MB/s ({self.source})"


def clamp_note(point: Throughput) -> str | None:
    """The sentence an estimate carries for a clamped ladder reading; None when the point was on the ladder."""
    if point.clamped is None:
        return None
    kib = point.inflight_bytes / 1024
    if point.clamped == "below":
        return (f"{kib:.0f} KiB in flight is below the ladder's smallest rung ({point.rung}): clamped to its "
                f"{point.mb_s:.0f} MB/s, not extrapolated; the drive is likely slower there")
    return (f"{kib:.0f} KiB in flight is beyond the ladder's largest rung ({point.rung}): clamped to its "
            f"{point.mb_s:.0f} MB/s (the drive taken as saturated), not extrapolated")
