"""Small applications run as real worker processes against a node's SQS endpoint."""
