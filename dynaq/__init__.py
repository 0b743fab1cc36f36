"""dynaq: a distributed message-queue cluster with Dynamiq's v1 REST API."""

__version__ = "0.1.0"

__all__ = ["__version__"]
