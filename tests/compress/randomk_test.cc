// Tests for the randomk codec.
