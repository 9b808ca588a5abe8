"""The idle step: sleep for the spec's seconds in a child process while the collectors sample the board."""

import sys


def run_idle(ctx, spec):
    seconds = float(spec["seconds"])
    proc = ctx.spawn([sys.executable, "-c", "import time; time.sleep(%r)" % seconds], name="idle")
    ctx.wait(proc, seconds + 30.0)
    return {"seconds": seconds}
