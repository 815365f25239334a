"""The doctor: what is wrong under a prefix (deadlocks across sessions, unsafe mixes of
layouts, long holders and queues, expired leases, leftover parents), read-only but for one
clock probe. ``ZooKeeperClient.diagnose()`` and ``aiozklock doctor`` are its entries;
``_diagnose.py`` says how the parts fit."""
