"""Tests of herald.cluster: the etcd client and the name server (against a real etcd)."""
