"""Collectors on the target: what samples the machine while a run's step runs.

- ``run``: the collectors of one run (``Collectors``), started before the step and stopped after it
- ``sampler``: the native sampler (runner/native/sampler): block stats, and the threads of the step's process
- ``tools``: tools run as processes: tegrastats, iostat, powermetrics
- ``snapshots``: files sampled by a thread: /proc/vmstat, /proc/pressure/*, thermal zones, power supplies, vm_stat
- ``jetson_stats``: the jtop service (jetson-stats), sampled through its client
- ``availability``: which collectors can run on this machine, and why not
  (``python3 -m runner.collectors.availability``)

Every collector writes a raw file into the run directory; the controller's parsers read it.
"""
