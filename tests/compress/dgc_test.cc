// Tests for the dgc codec.
