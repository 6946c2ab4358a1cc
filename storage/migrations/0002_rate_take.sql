-- weir migration 2: one GCRA step on the database clock (C-RATE-1, C-RATE-3).
-- The arithmetic is exactly weir_core::bucket::BucketParams::take, in bigint nanoseconds:
--   debt = max(tat - now, 0)
--   allowed iff debt + interval <= window; then tat' = now + debt + interval and
--   remaining = (window - debt - interval) / interval; else retry_after = debt + interval - window
-- Consistency first: the advisory transaction lock on the key serialises every take of that
-- key (including the first, when there is no row to lock yet), the row lock guards the row
-- against anything else that writes it, and clock_timestamp() (not now(), which is the start
-- of the transaction) is read after both locks are held, so takes are ordered on one clock.
CREATE FUNCTION weir_rate_take(
    p_key text,
    p_interval_ns bigint,
    p_window_ns bigint,
    p_ttl_ms bigint,
    OUT allowed boolean,
    OUT value_ns bigint,
    OUT now_ns bigint
)
LANGUAGE plpgsql
VOLATILE
AS $$
DECLARE
    v_tat      bigint;
    v_expires  timestamptz;
    v_now      timestamptz;
    v_debt     bigint;
    v_new_debt bigint;
BEGIN
    -- 2003134834 = 'weir': the two-int4 advisory lock space, apart from the migration lock.
    PERFORM pg_advisory_xact_lock(2003134834, hashtext(p_key));
    SELECT b.tat_ns, b.expires_at INTO v_tat, v_expires
      FROM weir_rate_buckets b
     WHERE b.key = p_key
       FOR UPDATE;
    v_now := clock_timestamp();
    now_ns := (extract(epoch FROM v_now) * 1000000)::bigint * 1000;
    IF v_tat IS NULL OR v_expires <= v_now THEN
        v_tat := 0;  -- a new or expired bucket is full
    END IF;
    v_debt := greatest(v_tat - now_ns, 0);
    IF v_debt + p_interval_ns <= p_window_ns THEN
        v_new_debt := v_debt + p_interval_ns;
        INSERT INTO weir_rate_buckets AS b (key, tat_ns, expires_at)
        VALUES (p_key, now_ns + v_new_debt, v_now + p_ttl_ms * interval '1 millisecond')
        ON CONFLICT (key) DO UPDATE
            SET tat_ns = excluded.tat_ns, expires_at = excluded.expires_at;
        allowed := true;
        value_ns := (p_window_ns - v_new_debt) / p_interval_ns;  -- remaining whole tokens
    ELSE
        allowed := false;
        value_ns := v_debt + p_interval_ns - p_window_ns;        -- retry_after in ns
    END IF;
END
$$;
