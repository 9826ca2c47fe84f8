"""Batch buffers and their reuse (private): slots a batched fetch writes into, the pools that hand
buffers out again once nothing holds them, and the worker pool released across processes."""
