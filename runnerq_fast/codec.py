"""Payload codec, selecting the compiled implementation when it is available.

See :mod:`runnerq_fast._codec_py` for the reference semantics and
:mod:`runnerq_fast.speedups` for how the implementation is chosen.
"""

from __future__ import annotations

from runnerq_fast import speedups
from runnerq_fast._codec_py import ACCEPTED, ACCEPTED_PAYLOAD, TYPED

if speedups.enabled:
    from runnerq_fast._codec import decode_json, encode_json, encode_metadata, encode_payload, is_plain_json
else:
    from runnerq_fast._codec_py import decode_json, encode_json, encode_metadata, encode_payload, is_plain_json

__all__ = [
    "ACCEPTED",
    "ACCEPTED_PAYLOAD",
    "TYPED",
    "decode_json",
    "encode_json",
    "encode_metadata",
    "encode_payload",
    "is_plain_json",
]
