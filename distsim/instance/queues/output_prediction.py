"""Predicted output lengths: what an output-length predictor in front of the engine would say of a request.

A prediction is the true output length times ``exp(sigma x z)``, z standard normal, so ``sigma`` is the
predictor's error in log space (0: an oracle). Each request's z depends only on the run's seed and the
request's id, never on which instance serves it or when it arrives there: two routing policies (or a
prefill and a decode instance) see the same prediction of a request, and no other stream moves. The
stream ("output_prediction" under the seed) gives one 128-bit key; a request's z is that key and its id
hashed (blake2b) to a uniform, through the normal quantile: a counter-based draw, one per request.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from statistics import NormalDist

from distsim.events.rng import stream
from distsim.request import Request

STREAM = "output_prediction"
_QUANTILE = NormalDist().inv_cdf
_TWO_64 = float(2**64)


@dataclass(frozen=True)
class OutputPrediction:
    """The predictor of one run: its log-space error ``sigma`` and the key of its draws."""

    sigma: float
    key: bytes

    @classmethod
    def of(cls, seed: int, sigma: float) -> OutputPrediction:
        return cls(float(sigma), stream(seed, STREAM).bytes(16))

    def z(self, request_id: int) -> float:
        """The standard normal draw of request ``request_id`` (hedge copies, negative ids, have their own)."""
        word = hashlib.blake2b(int(request_id).to_bytes(8, "little", signed=True), digest_size=8, key=self.key).digest()
        return _QUANTILE((int.from_bytes(word, "little") + 0.5) / _TWO_64)

    def predict(self, req: Request) -> float:
        """The predicted output length of ``req`` in tokens (the true length when sigma is 0)."""
        if not self.sigma:
            return float(req.output_tokens)
        return req.output_tokens * math.exp(self.sigma * self.z(req.request_id))


ORACLE = OutputPrediction(0.0, b"")
