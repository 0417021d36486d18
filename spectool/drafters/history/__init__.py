"""The training-free drafters: the history drafter (n-grams over a session's calls, arguments
carried over) and the learning drafter (plans and values mined from the conversations it drafts
for), with the mining they share.

Its modules are private: :mod:`spectool.drafters` re-exports what users import.
"""
