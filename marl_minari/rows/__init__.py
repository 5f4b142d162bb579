"""Episodes as row tables and transitions (pure numpy): per-agent steps, patterns, AEC turns."""
