"""Topology: racks, NVLink and network domains from Topology objects, HyperNodes or
node labels, and how multi-node pod groups fit in them."""
