"""The on-disk format of docs/format.md: names, ids, spaces, spec, metadata, index, digests."""
