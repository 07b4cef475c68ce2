"""Shared queues (CLUSTER.md §5): one queue consumable on every master of a cluster, its
messages kept in each publisher's own commit log and handed out in slots (WSO2 MB's model),
with etcd as the slot map."""
