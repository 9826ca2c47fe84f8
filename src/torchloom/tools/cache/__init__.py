"""``torchloom cache``: build a decoded cache of a dataset from the command line."""
