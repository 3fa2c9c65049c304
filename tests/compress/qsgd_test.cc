// Tests for the qsgd codec.
