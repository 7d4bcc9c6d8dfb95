"""The KU report's stimulus-response experiment: a client stimulates, a server responds."""
