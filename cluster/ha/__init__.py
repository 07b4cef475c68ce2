"""Commit-log replication inside a group (CLUSTER.md §3).

`epochs` holds the node's epoch history (`store/epochs`) and the truncation point a rejoining
node cuts its log to before it follows a master.
"""
