"""Board emulation, controller side: the ``emulate:`` key, its preflight, and how runs show it."""
