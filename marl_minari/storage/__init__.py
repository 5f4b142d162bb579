"""Datasets on disk: the one writer, the one reader, recordings, locks, durability, checks."""
