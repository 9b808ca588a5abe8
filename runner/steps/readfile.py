"""``python3 -m runner.steps.readfile``: read a file once, sequentially or in a random block permutation.

Every block is read exactly once, so the byte count is known: the device must deliver about the
file size when the cache is cold and about nothing when it is warm.
"""

import argparse
import json
import os
import random
import sys
import time


def read_file(path, pattern, bs, seed):
    size = os.path.getsize(path)
    offsets = list(range(0, size, bs))
    if pattern == "rand":
        random.Random(seed).shuffle(offsets)
    fd = os.open(path, os.O_RDONLY)
    total = 0
    try:
        if pattern == "rand" and hasattr(os, "posix_fadvise"):
            # tell the kernel not to read ahead: a random pattern should cost one device read per block
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
        start = time.monotonic_ns()
        for offset in offsets:
            total += len(os.pread(fd, bs, offset))
        elapsed = (time.monotonic_ns() - start) / 1e9
    finally:
        os.close(fd)
    return {"file": path, "pattern": pattern, "bs_bytes": bs, "file_bytes": size, "read_bytes": total,
            "blocks": len(offsets), "elapsed_s": elapsed,
            "read_bytes_per_s": total / elapsed if elapsed > 0 else None}


def main(argv=None):
    parser = argparse.ArgumentParser(prog="runner.steps.readfile")
    parser.add_argument("file")
    parser.add_argument("--pattern", choices=("seq", "rand"), default="seq")
    parser.add_argument("--bs", type=int, default=1 << 20)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    result = read_file(args.file, args.pattern, args.bs, args.seed)
    with open(args.out, "w") as out:
        json.dump(result, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
