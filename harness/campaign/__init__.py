"""The campaign: plan, preflight, one run's lifecycle, resume, and the orchestration across targets."""
