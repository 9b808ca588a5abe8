"""The step functions by kind: what the run spec's ``step.kind`` names."""

from runner.steps.bmoe import run_bmoe
from runner.steps.declared import run_declared
from runner.steps.equivalence import run_equivalence
from runner.steps.fio import run_fio
from runner.steps.idle import run_idle
from runner.steps.llama_bench import run_llama_bench
from runner.steps.llama_server import run_llama_server
from runner.steps.read import run_read
from runner.steps.replay import run_replay

STEPS = {"fio": run_fio, "read": run_read, "llama-bench": run_llama_bench, "llama-server": run_llama_server,
         "run": run_declared,
         "equivalence": run_equivalence,
         "bmoe": run_bmoe,
         "replay": run_replay,
         "idle": run_idle}
