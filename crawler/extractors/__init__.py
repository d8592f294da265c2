"""Pure functions from response text to item fields: no I/O, no crawler, easy to unit test."""
