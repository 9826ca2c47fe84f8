"""Know your data before training: ``doctor`` (what is wrong), ``prepare`` (a reproducible split),
``show`` (samples as the model sees them)."""
