"""harness: measure MoE LLMs streamed from SSD/flash on edge boards."""

__version__ = "0.1.0"
