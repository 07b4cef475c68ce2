"""Free TCP ports for tests that start servers in other processes (or restart them): see
`herald.core.ports`, which `herald cluster dev` uses too."""

from herald.core.ports import ephemeral_low, free_port

__all__ = ["ephemeral_low", "free_port"]
