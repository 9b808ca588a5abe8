"""Target-side agent. Standard library only, Python >= 3.8 (JetPack 6 ships 3.10, Termux and macOS 3.x).

The controller copies this package to a target, writes a run spec (JSON) and starts
``python3 -m runner run SPEC`` detached. Everything precisely timed happens here: cache
preparation and verification, collectors, the step, block-stat snapshots. The run directory ends
with ``run.json``, ``SHA256SUMS`` and a ``DONE`` marker.

- ``__main__``: the command line; ``agent``: one run, start to finish; ``run_context``: what a step may do
- ``contract``: the run spec and run record, and their version
- ``steps/``: what a run measures (fio, read, llama-bench, llama-server)
- ``collectors/``: what samples the machine meanwhile (native sampler, platform tools and files)
- ``probes/``: facts about the machine (``python3 -m runner probe``) and the entry state of a run
- ``emulation/``: a smaller board's memory and I/O budget (cgroups) and read_ahead_kb
- ``pagecache``: the cache state of the run's files; ``reap``: what a killed run left running
- ``enginebuild``: engine builds (llama.cpp) keyed by source, flags and compiler; ``util``: small shared helpers;
  ``sysroot``: the root every /proc, /sys and /etc path is read under (a fake tree in tests)
- ``native/``: C sources of cachectl and sampler (built on the target)
"""

RUNNER_VERSION = "1"
