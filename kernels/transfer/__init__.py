"""Transfers: host to device, device to host, on one device and between peers, as nvbandwidth counts them."""
