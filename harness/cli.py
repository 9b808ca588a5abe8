"""``harness`` command line. Each subcommand lives in ``harness/commands/`` (one module each).

Errors meant for users (HarnessError) print one line and exit with their code (2 for bad input);
``--debug`` shows the traceback instead.
"""

from __future__ import annotations

import sys

import typer
from rich.markup import escape

from harness.campaign import stopping
from harness.commands.common import err_console
from harness.errors import HarnessError

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Measure MoE LLMs streamed from SSD/flash on edge boards.")
results_app = typer.Typer(no_args_is_help=True, help="List and inspect result sets.")
app.add_typer(results_app, name="results")

_state = {"debug": False}


@app.callback()
def _main(debug: bool = typer.Option(False, "--debug", help="show tracebacks for errors")) -> None:
    _state["debug"] = debug


def _register() -> None:
    if app.registered_commands:  # main() called again in one process (the tests run the CLI in-process)
        return
    from harness.commands import (
        bisect,
        changes,
        ci,
        compare,
        deploy,
        estimate,
        gate,
        lease,
        model,
        parse,
        plan,
        probe,
        publish,
        report,
        results,
        run,
        targets,
        trace,
    )

    for module in (run, plan, targets, probe, report, parse, deploy, model, trace, lease, compare, gate, ci,
                   bisect, estimate):
        module.register(app)
    results.register(results_app)
    results_app.command("changes")(changes.changes)  # beside trend; its own module (results.py stays short)
    results_app.command("publish")(publish.publish)  # the static dashboard (harness/site/)


def main(argv: list[str] | None = None) -> None:
    """Entry point. Typer handles usage errors (exit 2); HarnessError becomes one line and its code."""
    _register()
    stopping.install()  # SIGINT, SIGTERM, SIGHUP: one clean stop, exit 128 + signal
    debug = "--debug" in (argv if argv is not None else sys.argv[1:])
    try:
        app(args=argv, prog_name="harness")
    except SystemExit as exc:
        # Typer turns KeyboardInterrupt into exit 130 whatever the signal was; say which, and exit 128 + it
        if exc.code == 130 and stopping.received() is not None:
            err_console.print(f"interrupted ({stopping.name()})", highlight=False)
            sys.exit(stopping.exit_code())
        raise
    except HarnessError as exc:
        if debug:
            raise
        # the message is text, never markup: "[matrix keys]" or a YAML list in it must reach the user as written
        err_console.print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False, soft_wrap=True)
        sys.exit(exc.exit_code)


if __name__ == "__main__":
    main()
