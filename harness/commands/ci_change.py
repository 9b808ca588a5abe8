"""The workflow ``harness ci init --gate change`` writes: gate the engine change a push makes, not a configuration.

The variant gate (:mod:`harness.commands.ci_workflow`) asks whether one cell of an experiment is slower than
another. This one asks whether the pushed revision made the engine slower: the candidate build (the engine of the
pushed revision: its source tree, its pinned submodule, its patch series) and the baseline build (the revision
before the push on the branch, or a pinned good revision) are both built on the board and measured interleaved in
one session, the experiment's ``build`` axis choosing the build per cell, and ``harness gate --across build``
compares each candidate cell with the baseline build's same cell, re-running suspects (``--confirm``).

Each side's engine tree is made by the "engine sources" step from a git worktree of its revision: ENGINE_DIR of it
(``.``: the repository is an engine fork; a submodule: a pinned upstream), copied without ``.git``, with the
revision's own patch series (PATCHES, ``*.patch`` in name order) applied; ``harness run --build-source NAME=path:DIR``
builds each. tests/test_ci_change.py runs that step's script on a real git repository.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from harness.commands.ci_workflow import DEFAULT_LABELS, RESULTS_DIR, expression_text

DEFAULT_OUT = ".github/workflows/engine-change.yml"
DEFAULT_CONFIRM = 3  # more interleaved rounds of a suspected cell before the gate decides
TREES = "engine-trees"  # under the runner's temporary directory: never inside the checked-out workspace

# @NAME@ placeholders as in ci_workflow (GitHub's own ${{ }} expressions need no escaping this way)
TEMPLATE = """\
# Gate the engine change a push makes: the pushed revision's engine (the candidate build) against the revision
# before it on the branch, or a pinned good revision (the baseline build), both built on the board and measured
# interleaved in one session, cell by cell, suspects re-run before the gate decides.
# Written by `harness ci init --gate change` (template: harness/commands/ci_change.py); docs/ci.md.
#
# Repository variables (Settings > Secrets and variables > Actions > Variables) override the defaults below:
#   BOARD                  the harness target to measure (targets/NAME.yaml); default: @BOARD_NOTE@
#   HARNESS_RUNNER_LABELS  the runner's labels as a JSON list; default: @LABELS_NOTE@
#   BASELINE_REV           a pinned good revision to compare with; default: the branch before the push
#
# The engine: ENGINE_DIR is its source tree in this repository ("." for an engine fork, a submodule for a pinned
# upstream); PATCHES, when not empty, a directory of *.patch applied to it in name order (a patch series). Each
# side is taken from its own revision, the series too. The experiment's matrix has a `build` axis naming the
# baseline build first and the candidate build; `harness run --build-source` replaces their sources.
#
# Never on pull requests, on purpose: a pull request from a fork would run its own code (the Makefile, the
# harness, the engine, the experiment) on the lab board, with the board's network, its keys and everything the
# runner user can reach. Only pushes to main (reviewed code) and a maintainer's manual run start it.
name: engine-change

on:
  push:
    branches: [main]
  workflow_dispatch:
    inputs:
      baseline_rev:
        description: the good revision to compare with (default BASELINE_REV, else the parent commit)
        required: false
        default: ""

permissions:
  contents: read

jobs:
  engine-change:
    if: ${{ (vars.BOARD || '@BOARD@') != '' }}  # no board configured: skipped, not queued forever
    runs-on: ${{ fromJSON(vars.HARNESS_RUNNER_LABELS || '@LABELS@') }}
    # one job at a time per board (the variant gate's group too): a second campaign would measure the first
    # one's I/O; never cancel a running one (a measurement cut short is lost), the next waits for the board
    concurrency:
      group: board-${{ vars.BOARD || '@BOARD@' }}
      cancel-in-progress: false
    timeout-minutes: 480
    env:
      BOARD: ${{ vars.BOARD || '@BOARD@' }}
      EXPERIMENT: @EXPERIMENT@
      ENGINE_DIR: @ENGINE_DIR@
      PATCHES: @PATCHES@
      BASELINE_BUILD: @BASELINE_BUILD@
      CANDIDATE_BUILD: @CANDIDATE_BUILD@
      BASELINE_REV: ${{ inputs.baseline_rev || vars.BASELINE_REV || '' }}
      PUSHED_BEFORE: ${{ github.event.before || '' }}
      RESULTS: @RESULTS@
      TREES: ${{ runner.temp }}/@TREES@
    steps:
      - uses: actions/checkout@v4
        with:
          fetch-depth: 0  # the revision before the push (or the pinned one) must be in the clone
          submodules: recursive

      - name: make setup
        run: make setup

      - name: engine sources
        id: sources
        # the baseline revision: the pinned one, else the branch before this push, else the parent commit (a
        # manual run, a new branch); each side's tree from its own revision, its own patch series applied
        run: |
          set -eu
          base="$BASELINE_REV"
          if [ -z "$base" ]; then base="$PUSHED_BEFORE"; fi
          if [ -z "$base" ] || [ "$base" = 0000000000000000000000000000000000000000 ]; then
            base="$(git rev-parse HEAD^)"
          fi
          rm -rf "$TREES"
          git worktree prune  # a previous job's trees on this runner: gone, and unregistered
          for side in candidate baseline; do
            rev="$(git rev-parse HEAD)"
            if [ "$side" = baseline ]; then rev="$(git rev-parse "$base^{commit}")"; fi
            checkout="$TREES/$side-checkout"
            git worktree add --detach "$checkout" "$rev"
            git -C "$checkout" submodule update --init --recursive
            mkdir -p "$TREES/$side"
            tar -C "$checkout/$ENGINE_DIR" --exclude=.git -cf - . | tar -C "$TREES/$side" -xf -
            if [ -n "$PATCHES" ] && [ -d "$checkout/$PATCHES" ]; then
              for patch in "$checkout/$PATCHES"/*.patch; do
                # outside any repository (the ceiling): git apply patches the tree as `patch -p1` would
                if [ -e "$patch" ]; then
                  (cd "$TREES/$side" && GIT_CEILING_DIRECTORIES="$TREES" git apply --verbose "$patch")
                fi
              done
            fi
            echo "$side=path:$TREES/$side" >> "$GITHUB_OUTPUT"
            echo "${side}_rev=$rev" >> "$GITHUB_OUTPUT"
          done

      - name: harness run
        id: run
        env:
          CANDIDATE_SOURCE: ${{ steps.sources.outputs.candidate }}
          BASELINE_SOURCE: ${{ steps.sources.outputs.baseline }}
        run: |
          rm -rf "$RESULTS"
          status=0
          .venv/bin/harness run "$EXPERIMENT" --target "$BOARD" --results "$RESULTS" \\
            --build-source "$CANDIDATE_BUILD=$CANDIDATE_SOURCE" --build-source "$BASELINE_BUILD=$BASELINE_SOURCE" \\
            || status=$?
          # the fresh results directory holds exactly this run's set (complete, or .incomplete if cut short)
          for set in "$RESULTS"/*/; do echo "set=${set%/}" >> "$GITHUB_OUTPUT"; done
          exit "$status"

      - name: harness gate
        if: ${{ always() && steps.run.outputs.set != '' }}
        env:
          SET: ${{ steps.run.outputs.set }}
        # each candidate cell against the baseline build's same cell; suspects re-run before the decision;
        # exit 0 pass, 1 regression, 2 bad input, 3 infrastructure; it appends its table and which build
        # regressed to the job summary
        run: >-
          .venv/bin/harness gate "$SET" --across build --baseline-value "$BASELINE_BUILD"
          --metric decode_tps --max-regression 5% --confirm @CONFIRM@ --junit gate.xml

      - name: upload the result sets
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
          CANDIDATE_REV: ${{ steps.sources.outputs.candidate_rev }}
          BASELINE_REV_USED: ${{ steps.sources.outputs.baseline_rev }}
        run: |
          {
            echo "### harness on $BOARD: $EXPERIMENT, build $CANDIDATE_BUILD vs build $BASELINE_BUILD"
            echo "candidate: \\`${CANDIDATE_REV:-none}\\`, baseline: \\`${BASELINE_REV_USED:-none}\\`"
            echo "result set: \\`${SET:-none written}\\` (artifact result-set-${{ github.run_id }})"
          } >> "$GITHUB_STEP_SUMMARY"

      - name: remove the engine trees
        if: always()
        run: |
          rm -rf "$TREES"
          git worktree prune
"""


def render(*, board: str | None = None, labels: Sequence[str] | None = None, experiment: str,
           engine_dir: str = ".", patches: str = "", baseline_build: str, candidate_build: str,
           confirm: int = DEFAULT_CONFIRM) -> str:
    """The change workflow for ``board`` (None: whatever the BOARD variable says) on a runner with ``labels``."""
    listed = json.dumps(list(labels or DEFAULT_LABELS), separators=(",", ":"))
    values = {
        "@BOARD_NOTE@": board or "none (set it to enable the job)",
        "@LABELS_NOTE@": listed,
        "@BOARD@": expression_text(board or ""),
        "@LABELS@": expression_text(listed),
        # JSON strings are YAML double-quoted scalars
        "@EXPERIMENT@": json.dumps(experiment),
        "@ENGINE_DIR@": json.dumps(engine_dir),
        "@PATCHES@": json.dumps(patches),
        "@BASELINE_BUILD@": json.dumps(baseline_build),
        "@CANDIDATE_BUILD@": json.dumps(candidate_build),
        "@CONFIRM@": str(confirm),
        "@RESULTS@": RESULTS_DIR,
        "@TREES@": TREES,
    }
    text = TEMPLATE
    for placeholder, value in values.items():
        text = text.replace(placeholder, value)
    return text
