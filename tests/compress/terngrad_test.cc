// Tests for the terngrad codec.
