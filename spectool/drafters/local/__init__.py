"""The local drafter: an in-process model (transformers, or llama.cpp for a GGUF) that drafts
tool calls under a JSON-schema grammar, from the compact prompt its shipped adapter is tuned on.

Its modules are private: :mod:`spectool.drafters` re-exports what users import.
"""
