"""The step functions by kind: what the run spec's ``step.kind`` names."""

from runner.steps.fio import run_fio
from runner.steps.llama_bench import run_llama_bench
from runner.steps.llama_server import run_llama_server
from runner.steps.read import run_read

STEPS = {"fio": run_fio, "read": run_read, "llama-bench": run_llama_bench, "llama-server": run_llama_server}
