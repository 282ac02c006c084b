"""An order pipeline built on runnerq-fast (see examples/README.md)."""
