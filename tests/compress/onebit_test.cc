// Tests for the onebit codec.
