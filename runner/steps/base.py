"""What every step shares."""


class StepFailed(Exception):
    """The step could not run or did not finish: the run fails with this message."""


def step_env(spec):
    """The variables a step's (or an equivalence side's) spec adds to its engine's environment: ``env``, names to
    strings (harness/steps/env.py validated them; a spec written by hand is checked again here). Passed to
    ``ctx.spawn``, which adds them to the environment the runner builds for the process, not replacing it."""
    env = spec.get("env") or {}
    if not isinstance(env, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in env.items()):
        raise StepFailed("the spec's env must map names to strings, got %r" % (env,))
    return env
