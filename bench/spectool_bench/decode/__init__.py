"""`spectool decode-bench` and `spectool calibrate`: tree speculative decoding measured against
autoregressive decoding and prompt lookup."""
