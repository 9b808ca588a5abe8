"""Figures (one registry, each declaring the tables it needs) and the report that renders whatever applies."""
