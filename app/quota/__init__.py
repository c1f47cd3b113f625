"""Sharing a group's quota among the processes that enforce it (PIP-82's enforcement)."""
