"""New datasets made from others: combining them (and subsets of them)."""
