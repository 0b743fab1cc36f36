"""Amazon SQS's wire protocol on the node: AWS SDKs and tools use dynaq unchanged."""
