"""Configuration: experiment and target YAML, validated with pydantic, errors with file:line."""
