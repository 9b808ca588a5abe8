"""Board emulation on the target: a memory and I/O budget per run (cgroups) and read_ahead_kb.

``spec["emulate"]`` (from the controller) holds ``memory_bytes``, ``read_bytes_per_s``, ``read_iops``
and ``read_ahead_kb``, each optional. For one run:

- a fresh cgroup ``.../harness/<run_id>.<runner pid>`` gets the limits: cgroup v2 ``memory.max`` / ``io.max``
  where the v2 hierarchy offers the controller, cgroup v1 ``memory.limit_in_bytes`` /
  ``blkio.throttle.read_{bps,iops}_device`` otherwise. v1 also sets ``memory.memsw.limit_in_bytes``
  (v2: ``memory.swap.max 0``) where it exists: the budget is all the memory the step gets, it cannot
  spill into the host's swap (a board's zram is not emulated).
- The step's processes enter the cgroup between fork and exec (``enter`` as Popen's preexec_fn), so
  every page they touch -- page cache included -- is charged to the budget from the first one.
- Pages stay charged to the cgroup that first touched them. The runner's cache preparation (cachectl)
  runs outside: cold evicts the file first, so the step faults it all in under the budget; warm means
  the file sits in the host's page cache, charged outside the budget, and the step reads it without
  device I/O -- the no-I/O bound, not what a small board could keep resident.
- ``read_ahead_kb`` is a machine-wide block-device setting. It is changed only under a machine-wide
  lock, after the original value was written to a state file, and restored in teardown (the agent's
  finally-block, which also runs on SIGTERM). A runner killed outright leaves the state file: the
  controller runs ``repair`` as soon as it sees the runner dead, and every runner does before anything
  else. The original value is in run.json as well. Each runner's cgroups are recorded the same way
  (run-PID.json, no lock needed: they are its own) and removed once that runner is dead. The state lives in /run
  (cleared at reboot, exactly when the kernel resets the setting), not in one workdir: any runner on
  the machine must be able to repair it.
- What the machine does not allow is a refusal (EmulationError naming what is missing), never a
  silently unemulated run.

Modules: ``run`` (one run's emulation: setup, enter, teardown), ``check`` (what this machine cannot do),
``lock`` (the machine-wide lock around read_ahead_kb), ``state`` (what a runner changed, on disk until undone),
``repair`` (undo what a dead runner left), ``cgroup`` (the v1 and v2 file formats), ``base`` (what they share),
``budget`` (a memory cgroup of its own for part of a step: the equivalence step's sides).
``python3 -m runner.emulation check|repair`` is the controller's preflight and clean-up.
"""

from runner.emulation.lock import machine_lock

__all__ = ["machine_lock"]
