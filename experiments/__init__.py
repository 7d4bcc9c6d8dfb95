"""Ready experiments: one folder each, the experiment file beside its programs."""
