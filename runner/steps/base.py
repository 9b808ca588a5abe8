"""What every step shares."""


class StepFailed(Exception):
    """The step could not run or did not finish: the run fails with this message."""
