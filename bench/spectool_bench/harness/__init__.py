"""The main job (`spectool bench`): agents against a replayed or embedded main model, the sweep over
drafters and λ, the oracle drafter, metrics."""
