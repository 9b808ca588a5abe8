"""Model files: synthetic MoE GGUFs and metadata-only inspection of any GGUF."""
