-- weir migration 3: set a bucket to hold a given number of whole tokens on the database clock,
-- the management "refill to n tokens" command (C-MGMT-4, C-RATE-3).
--   tat = now + window - tokens * interval; a full bucket is the absent row.
-- The same advisory transaction lock and row lock as weir_rate_take, so a set and the takes of
-- the key are ordered; the clock is read after both are held. The caller clamps tokens to the
-- capacity (window / interval); the function clamps again so a bad call cannot store a tat
-- beyond a full refill.
CREATE FUNCTION weir_rate_set(
    p_key text,
    p_interval_ns bigint,
    p_window_ns bigint,
    p_ttl_ms bigint,
    p_tokens bigint,
    OUT now_ns bigint
)
LANGUAGE plpgsql
VOLATILE
AS $$
DECLARE
    v_now  timestamptz;
    v_debt bigint;
BEGIN
    PERFORM pg_advisory_xact_lock(2003134834, hashtext(p_key));
    PERFORM 1 FROM weir_rate_buckets b WHERE b.key = p_key FOR UPDATE;
    v_now := clock_timestamp();
    now_ns := (extract(epoch FROM v_now) * 1000000)::bigint * 1000;
    v_debt := p_window_ns
        - least(greatest(p_tokens, 0), p_window_ns / p_interval_ns) * p_interval_ns;
    IF v_debt <= 0 THEN
        DELETE FROM weir_rate_buckets WHERE key = p_key;
    ELSE
        INSERT INTO weir_rate_buckets AS b (key, tat_ns, expires_at)
        VALUES (p_key, now_ns + v_debt, v_now + p_ttl_ms * interval '1 millisecond')
        ON CONFLICT (key) DO UPDATE
            SET tat_ns = excluded.tat_ns, expires_at = excluded.expires_at;
    END IF;
END
$$;
