"""Target-side agent. Standard library only, Python >= 3.8 (JetPack 6 ships 3.10, Termux and macOS 3.x).

The controller copies this package to a target, writes a run spec (JSON) and starts
``python3 -m runner run SPEC`` detached. Everything precisely timed happens here: cache
preparation and verification, collectors, the step, block-stat snapshots. The run directory ends
with ``run.json``, ``SHA256SUMS`` and a ``DONE`` marker.
"""

RUNNER_VERSION = "1"
