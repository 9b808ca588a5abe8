"""Engines the harness builds and runs (llama.cpp first; adapters for others come later)."""
