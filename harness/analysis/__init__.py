"""Analysis on result-set tables: statistics (own module, with sources) and derived views."""
