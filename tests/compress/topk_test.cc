// Tests for the topk codec.
