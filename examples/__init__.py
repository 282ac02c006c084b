"""Example applications for runnerq-fast (see examples/README.md)."""
