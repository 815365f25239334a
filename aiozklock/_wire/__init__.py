"""The wire: a ZooKeeper session on anyio streams (framing, xids, liveness, reconnect, watches)."""
