"""`spectool drafters eval`: drafters evaluated offline on BFCL ground truth (accuracy, speed, the
tuned adapter, the prompt check); `spectool drafters tune` is the core's (`spectool.drafters.tune`)."""
