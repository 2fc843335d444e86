"""The trio runtime: the node, its single writer and its iproto server."""
