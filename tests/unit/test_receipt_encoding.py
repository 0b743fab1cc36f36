"""Receipts keep their wire form: unpadded base64url of (id, delivery), 22 characters."""

from __future__ import annotations

import base64
import struct

from hypothesis import given
from hypothesis import strategies as st

from dynaq.core.receipts import decode_receipt, encode_receipt, encode_receipts


@given(st.integers(1, 2**63 - 1), st.integers(1, 2**64 - 1))
def test_a_receipt_is_unpadded_base64url_and_decodes_back(message_id: int, delivery: int) -> None:
    receipt = encode_receipt(message_id, delivery)
    raw = struct.pack(">QQ", message_id, delivery)
    assert receipt == base64.urlsafe_b64encode(raw).rstrip(b"=").decode()
    assert len(receipt) == 22 and "=" not in receipt
    assert decode_receipt(receipt) == (message_id, delivery)


@given(st.lists(st.tuples(st.integers(1, 2**63 - 1), st.integers(1, 2**64 - 1)), max_size=40))
def test_receipts_encoded_together_are_each_receipt(pairs: list[tuple[int, int]]) -> None:
    assert encode_receipts(pairs) == [encode_receipt(m, d) for m, d in pairs]
