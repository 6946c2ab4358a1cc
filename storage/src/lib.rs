//! Shared Redis and PostgreSQL rate-limit stores (their own issue follows).
