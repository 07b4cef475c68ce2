"""A herald plugin that cannot be imported: it stands for a plugin whose dependency is missing."""

raise ImportError("herald_broken_plugin needs the 'frobnicate' package, which is not installed")
