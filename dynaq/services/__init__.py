"""Services: queues, topics and the config catalog, written once over the storage contract."""
