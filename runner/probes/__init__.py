"""Facts about the target machine, read on the target.

- ``machine``: what ``python3 -m runner probe`` prints, and the entry state recorded before every run
- ``blockdev``: the block device holding a file, its queue settings and its stat line
- ``platforms``: which platform this is (jetson, android, macos, linux) and its own facts, from
  ``linux``, ``jetson``, ``android`` and ``macos``

Every path is read under ``runner.sysroot`` (a fake tree in tests).
"""
