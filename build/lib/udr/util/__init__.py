"""Shared utilities: atomic file writes, progress bars, devices and torch.distributed, seeded generators."""
