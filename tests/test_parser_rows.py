"""The parsers' row types say the truth (issue 22's typed rows): on real captures, every row of a parser typed by
a TypedDict has exactly that TypedDict's keys, in its order (the order the columns reach a table), and the
declared-engine parser's view of the extraction rules has the fields of the configuration model it is dumped from.
The types are only checked by mypy; these tests hold them to what the parsers really return."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import get_type_hints

import pytest
from pydantic import BaseModel

from harness.config import declared_engine
from harness.parsers import blockstat, counters, declared, jetson_clocks, nvpmodel, offcpu, sampler
from tests.helpers import DATA

# (parser, capture, row type(s): a row is one of them, told apart by its first key's value where there are two)
TYPED = [
    (offcpu.parse_offcpu, DATA / "offcpu" / "offcpu-regs.txt", [offcpu.OffcpuRow]),
    (counters.parse_counters, DATA / "counters" / "counters-v2-fio-forked-job.txt",
     [counters.CounterThreadRow, counters.CounterPsiRow]),
    (counters.parse_counters, DATA / "counters" / "counters.txt", [counters.CounterThreadRow, counters.CounterPsiRow]),
    (sampler.parse_sampler_threads, DATA / "sampler" / "threads-v3-fio-forked-job-psync-direct.txt",
     [sampler.ThreadSample]),
    (sampler.parse_sampler_threads, DATA / "sampler" / "threads-fio-2x-psync-direct.txt", [sampler.ThreadSample]),
    (sampler.parse_sampler_processes, DATA / "sampler" / "threads-v3-fio-forked-job-psync-direct.txt",
     [sampler.ProcessRow]),
    (blockstat.parse_blockstat, DATA / "sampler" / "block-vda-during-fio.txt", [blockstat.BlockStatRow]),
    (blockstat.parse_blockstat, DATA / "blockstat" / "vda-stat-17-fields.txt", [blockstat.BlockStatRow]),
    (nvpmodel.parse_nvpmodel, DATA / "nvpmodel" / "q-verbose-orin-nano-super-25w-r36.4.3.txt", [nvpmodel.NvpmodelRow]),
    (jetson_clocks.parse_jetson_clocks, DATA / "jetson" / "jetson-clocks-show-orin-nano-super-25w-jp7.txt",
     [jetson_clocks.JetsonClocksRow]),
]


def keys_of(row_type: type) -> list[str]:
    return list(get_type_hints(row_type))


@pytest.mark.parametrize(("parse", "capture", "row_types"), TYPED,
                         ids=[f"{parse.__name__}-{capture.name}" for parse, capture, _ in TYPED])
def test_every_row_has_its_typed_dicts_keys_in_order(parse: Callable[[bytes], list[Mapping[str, object]]],
                                                     capture: Path, row_types: list[type]) -> None:
    rows = parse(capture.read_bytes())
    assert rows
    shapes = {tuple(keys_of(row_type)) for row_type in row_types}
    found = {tuple(row) for row in rows}
    assert found <= shapes, found - shapes
    if len(row_types) > 1:  # counters: both kinds are in the capture
        assert found == shapes


def test_the_derived_rows_have_their_typed_dicts_keys() -> None:
    rows = blockstat.parse_blockstat((DATA / "sampler" / "block-vda-during-fio.txt").read_bytes())
    intervals = blockstat.derive_intervals(rows)
    assert intervals and {tuple(row) for row in intervals} == {tuple(keys_of(blockstat.BlockInterval))}
    assert list(blockstat.delta(rows[0], rows[-1])) == keys_of(blockstat.BlockDelta)
    threads = sampler.parse_sampler_threads((DATA / "sampler" / "threads-fio-2x-psync-direct.txt").read_bytes())
    states = sampler.thread_state_fractions(threads)
    assert states and {tuple(row) for row in states} == {tuple(keys_of(sampler.ThreadStates))}
    [clocks] = jetson_clocks.parse_jetson_clocks(
        (DATA / "jetson" / "jetson-clocks-show-orin-nano-super-25w-jp7.txt").read_bytes())
    assert {tuple(cpu) for cpu in clocks["cpus"]} == {tuple(keys_of(jetson_clocks.JetsonCpu))}
    [mode] = nvpmodel.parse_nvpmodel((DATA / "nvpmodel" / "q-verbose-orin-nano-super-25w-r36.4.3.txt").read_bytes())
    assert mode["params"] and {tuple(p) for p in mode["params"]} == {tuple(keys_of(nvpmodel.NvpmParam))}


@pytest.mark.parametrize(("spec", "model"), [
    (declared.ExtractRuleSpec, declared_engine.ExtractRule), (declared.ScaledColumnSpec, declared_engine.ScaledColumn),
    (declared.PivotSpec, declared_engine.Pivot), (declared.CsvSpec, declared_engine.CsvRule)])
def test_the_declared_parsers_rules_have_the_configurations_fields(spec: type, model: type[BaseModel]) -> None:
    """parsers may not import the configuration (the layers contract), so the rule's shape is written twice: a field
    added to the model must be added to the parser's TypedDict too."""
    assert set(keys_of(spec)) == set(model.model_fields)
