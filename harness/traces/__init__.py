"""Routing traces: which experts each MoE layer chose, per token (synthetic, or recorded from an engine)."""
