"""The HTTP API: thin aiohttp handlers that parse, call a service and serialize."""
