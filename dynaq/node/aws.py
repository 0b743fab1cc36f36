"""Wiring of the SQS wire protocol (:mod:`dynaq.api.aws`) from the ``[aws]`` config."""

from __future__ import annotations

from dynaq.api.aws.sigv4 import parse_keys
from dynaq.api.aws.sqs import SqsSettings
from dynaq.clock import Clock
from dynaq.config import Config
from dynaq.core.access import AccessPolicy


def build_sqs(config: Config, access: AccessPolicy | None, clock: Clock) -> SqsSettings:
    """The SQS endpoint's settings: keys bound to tokens by name; unsigned requests let in
    when ``aws.anonymous`` says so, or when neither keys nor bearer tokens exist (the
    node then serves anyone on its loopback address, as its own API does)."""
    tokens = {} if access is None else {t.name: t for t in access.tokens}
    keys = parse_keys(config.aws.keys, tokens)
    anonymous = config.aws.anonymous or (not keys and access is None)
    return SqsSettings(keys, anonymous, config.aws.region, clock, config.aws.purge_interval_s)
