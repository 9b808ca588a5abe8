"""The GitHub Actions workflow ``harness ci init`` writes: the one source of ``.github/workflows/regression.yml``.

The committed workflow is this template rendered with the defaults (no board: the job is skipped until the
repository variable BOARD names one); tests/test_ci_workflow.py checks that they agree and that both pass the
GitHub workflow schema.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

DEFAULT_EXPERIMENT = "experiments/quickstart.yaml"
DEFAULT_LABELS = ("self-hosted",)
DEFAULT_OUT = ".github/workflows/regression.yml"
RESULTS_DIR = "ci-results"  # inside the workspace: a fresh directory per run, so the one set in it is this run's

# @NAME@ placeholders (GitHub's own ${{ }} expressions need no escaping this way)
TEMPLATE = """\
# Measure on a board attached to a self-hosted runner and gate on regressions.
# Written by `harness ci init` (template: harness/commands/ci_workflow.py); docs/guide.md "CI on a self-hosted runner".
#
# Repository variables (Settings > Secrets and variables > Actions > Variables) override the defaults below:
#   BOARD                  the harness target to measure (targets/NAME.yaml); default: @BOARD_NOTE@
#   HARNESS_RUNNER_LABELS  the runner's labels as a JSON list; default: @LABELS_NOTE@
#   BASELINE_VARIANT       the cell the gate compares the others with; default: @BASELINE@
#   HARNESS_HISTORY        a directory on the runner that keeps every night's set; when set, each set is copied
#                          there, the change points it confirms are listed in the job summary and the history is
#                          published as a static site (artifact dashboard-RUN); default: none
#
# Never on pull requests, on purpose: a pull request from a fork would run its own code (the Makefile, the
# harness, the experiment) on the lab board, with the board's network, its keys and everything the runner user
# can reach. Only pushes to main (reviewed code), the schedule and a maintainer's manual run start it.
name: regression

on:
  push:
    branches: [main]
  schedule:
    - cron: "17 3 * * *"  # nightly, so a quiet week still has a history
  workflow_dispatch:

permissions:
  contents: read

jobs:
  regression:
    if: ${{ (vars.BOARD || '@BOARD@') != '' }}  # no board configured: skipped, not queued forever
    runs-on: ${{ fromJSON(vars.HARNESS_RUNNER_LABELS || '@LABELS@') }}
    # one job at a time per board: a second campaign would measure the first one's I/O; never cancel a running
    # one (a measurement cut short is lost), the next waits for the board instead
    concurrency:
      group: board-${{ vars.BOARD || '@BOARD@' }}
      cancel-in-progress: false
    timeout-minutes: 360
    env:
      BOARD: ${{ vars.BOARD || '@BOARD@' }}
      EXPERIMENT: @EXPERIMENT@
      BASELINE_VARIANT: ${{ vars.BASELINE_VARIANT || '@BASELINE@' }}
      HARNESS_HISTORY: ${{ vars.HARNESS_HISTORY || '' }}
      RESULTS: @RESULTS@
    steps:
      - uses: actions/checkout@v4

      - name: make setup
        run: make setup

      - name: harness run
        id: run
        run: |
          rm -rf "$RESULTS"
          status=0
          .venv/bin/harness run "$EXPERIMENT" --target "$BOARD" --results "$RESULTS" || status=$?
          # the fresh results directory holds exactly this run's set (complete, or .incomplete if cut short)
          for set in "$RESULTS"/*/; do echo "set=${set%/}" >> "$GITHUB_OUTPUT"; done
          exit "$status"

      - name: harness gate
        if: ${{ always() && steps.run.outputs.set != '' }}
        env:
          SET: ${{ steps.run.outputs.set }}
        # exit 0 pass, 1 regression, 2 bad input, 3 infrastructure; it appends its table to the job summary
        run: >-
          .venv/bin/harness gate "$SET" --baseline-variant "$BASELINE_VARIANT"
          --metric decode_tps --max-regression 5% --junit gate.xml

      - name: change points
        if: ${{ always() && steps.run.outputs.set != '' && env.HARNESS_HISTORY != '' }}
        env:
          SET: ${{ steps.run.outputs.set }}
        # informational (exit 0): which steps in the board's history tonight's set confirms, in the job summary
        run: |
          mkdir -p "$HARNESS_HISTORY"
          cp -r "$SET" "$HARNESS_HISTORY/"
          .venv/bin/harness results changes decode_tps --target "$BOARD" --results "$HARNESS_HISTORY" --new

      - name: dashboard
        if: ${{ always() && env.HARNESS_HISTORY != '' }}
        # the board's history as a static site: download the artifact and open dashboard/index.html (no server)
        run: .venv/bin/harness results publish dashboard --results "$HARNESS_HISTORY"

      - name: upload the dashboard
        if: ${{ always() && env.HARNESS_HISTORY != '' }}
        uses: actions/upload-artifact@v4
        with:
          name: dashboard-${{ github.run_id }}
          path: dashboard
          if-no-files-found: ignore

      - name: upload the result set
        if: always()
        uses: actions/upload-artifact@v4
        with:
          name: result-set-${{ github.run_id }}
          path: @RESULTS@
          if-no-files-found: warn

      - name: upload the gate's JUnit report
        if: always()
        uses: actions/upload-artifact@v4
        with:
          name: gate-junit-${{ github.run_id }}
          path: gate.xml
          if-no-files-found: warn

      - name: summary
        if: always()
        env:
          SET: ${{ steps.run.outputs.set }}
        run: |
          {
            echo "### harness on $BOARD: $EXPERIMENT"
            echo "result set: \\`${SET:-none written}\\` (artifact result-set-${{ github.run_id }})"
          } >> "$GITHUB_STEP_SUMMARY"
"""


def render(*, board: str | None = None, labels: Sequence[str] | None = None,
           experiment: str = DEFAULT_EXPERIMENT, baseline: str = "") -> str:
    """The workflow for ``board`` (None: whatever the BOARD variable says) on a runner with ``labels``."""
    listed = json.dumps(list(labels or DEFAULT_LABELS), separators=(",", ":"))
    values = {
        "@BOARD_NOTE@": board or "none (set it to enable the job)",
        "@LABELS_NOTE@": listed,
        "@BOARD@": expression_text(board or ""),
        "@LABELS@": expression_text(listed),
        "@BASELINE@": expression_text(baseline),
        "@EXPERIMENT@": json.dumps(experiment),  # a JSON string is a YAML double-quoted scalar
        "@RESULTS@": RESULTS_DIR,
    }
    text = TEMPLATE
    for placeholder, value in values.items():
        text = text.replace(placeholder, value)
    return text


def expression_text(value: str) -> str:
    """A value inside a single-quoted string of a GitHub expression: quotes doubled."""
    return value.replace("'", "''")
