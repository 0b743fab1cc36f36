"""Pure core: ids, keyspace, partitions, key layout, membership view."""
