"""The durable record of a sweep: run specs and results, and the SQLite store that keeps them."""
