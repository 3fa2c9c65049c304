// Tests for the threshold codec.
