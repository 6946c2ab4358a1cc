-- weir migration 1: the shared rate-limit buckets (C-RATE-3, C-RATE-7).
-- One row per client key: the GCRA theoretical arrival time in nanoseconds since the Unix
-- epoch on the database clock, and when the row may be dropped (full refill time + margin
-- after the last allowed take: by then the bucket is full and the row carries no information).
CREATE TABLE weir_rate_buckets (
    key        text        PRIMARY KEY,
    tat_ns     bigint      NOT NULL,
    expires_at timestamptz NOT NULL
);

CREATE INDEX weir_rate_buckets_expires_at ON weir_rate_buckets (expires_at);
