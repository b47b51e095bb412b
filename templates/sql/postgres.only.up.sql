-- The key table's functions, reading and writing idempotency_keys itself
-- only (runtime/pgstore; docs/semantics.md §7.2).
--
-- A row of an inheritance child of idempotency_keys is a row of the table
-- to every statement that names the table without ONLY: a child's
-- completed row would answer a claim as a replay, and an expired row of a
-- key in a child would have idempotency_sweep delete the same key's live
-- row in the table itself. These are 000001's functions with ONLY in every
-- statement that reads, updates or deletes the table; 000001 explains
-- each. An INSERT writes the table it names, with or without ONLY.
--
-- Applying this file twice is harmless: every function is created with
-- CREATE OR REPLACE, under the signature 000001 gave it, in the schema of
-- the key table, as 000001's were. A process of an older release runs
-- them as it ran 000001's: they take the same arguments and return the
-- same rows.

CREATE OR REPLACE FUNCTION idempotency_claim(
    p_tenant      text,
    p_scope       text,
    p_key         text,
    p_operation   text,
    p_fingerprint bytea,
    p_token       text,
    p_lease_us    bigint,
    p_ttl_us      bigint,
    p_takeover    boolean,
    p_hold        boolean,
    OUT r_outcome            text,
    OUT r_state              text,
    OUT r_operation          text,
    OUT r_fingerprint        bytea,
    OUT r_lease_remaining_us bigint,
    OUT r_status             integer,
    OUT r_headers            bytea,
    OUT r_body               bytea,
    OUT r_body_omitted       boolean
)
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_now   timestamptz;
    v_row   idempotency_keys%ROWTYPE;
    v_lock  bigint := idempotency_lock_id(p_tenant, p_scope, p_key);
    v_req   bigint := idempotency_request_lock_id(p_tenant, p_scope, p_key, p_operation, p_fingerprint);
BEGIN
    -- A lost insert must be followed by a read that sees the row that beat
    -- it, even one committed after this call began. The check comes first
    -- so that a misconfigured database fails on its first claim, not on
    -- its first race.
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION 'idempotency_claim must run in READ COMMITTED, not %',
            current_setting('transaction_isolation')
            USING ERRCODE = 'IK002';
    END IF;
    IF NOT pg_try_advisory_xact_lock(v_req) THEN
        r_outcome := 'busy';
        RETURN;
    END IF;
    IF NOT pg_try_advisory_xact_lock(v_lock) THEN
        r_outcome := 'busy_other';
        RETURN;
    END IF;

    -- With the lock held no other claim writes the key, but the row can
    -- still change under a pass: its holder completes or releases it, or a
    -- sweeper deletes it once expired. A pass that loses such a race reads
    -- again; the loop is a bound, not a wait, and its honest last answer
    -- is "busy".
    FOR attempt IN 1..4 LOOP
        v_now := clock_timestamp();

        INSERT INTO idempotency_keys
               (tenant, scope, key, operation, fingerprint, state,
                lease_token, lease_until, fail_closed, expires_at, created_at)
        VALUES (p_tenant, p_scope, p_key, p_operation, p_fingerprint, 'in_flight',
                p_token, v_now + p_lease_us * interval '1 microsecond', p_hold OR NOT p_takeover,
                v_now + greatest(p_ttl_us, p_lease_us) * interval '1 microsecond', v_now)
        ON CONFLICT (tenant, scope, key) DO NOTHING;
        IF FOUND THEN
            r_outcome := 'won';
            EXIT;
        END IF;

        -- An expired row counts as absent: replace it in place.
        UPDATE ONLY idempotency_keys k
           SET operation    = p_operation,
               fingerprint  = p_fingerprint,
               state        = 'in_flight',
               lease_token  = p_token,
               lease_until  = v_now + p_lease_us * interval '1 microsecond',
               fail_closed  = p_hold OR NOT p_takeover,
               expires_at   = v_now + greatest(p_ttl_us, p_lease_us) * interval '1 microsecond',
               created_at   = v_now,
               completed_at = NULL,
               status       = NULL,
               headers      = NULL,
               body         = NULL,
               body_omitted = false
         WHERE k.tenant = p_tenant AND k.scope = p_scope AND k.key = p_key
           AND k.expires_at <= v_now;
        IF FOUND THEN
            r_outcome := 'won';
            EXIT;
        END IF;

        SELECT * INTO v_row
          FROM ONLY idempotency_keys k
         WHERE k.tenant = p_tenant AND k.scope = p_scope AND k.key = p_key;
        IF NOT FOUND OR v_row.expires_at <= v_now THEN
            CONTINUE;
        END IF;
        IF v_row.fingerprint <> p_fingerprint OR v_row.operation <> p_operation THEN
            r_outcome := 'mismatch';
            EXIT;
        END IF;
        IF v_row.state <> 'in_flight' OR v_row.lease_until > v_now THEN
            r_outcome := 'lost';
            EXIT;
        END IF;

        -- The lease of this very request's earlier claim ran out. It is
        -- taken over only when both claims allow it: a row whose own claim
        -- fails closed becomes indeterminate whatever this claim asks. The
        -- UPDATE is fenced on the token read, like every write to a claim.
        -- A takeover keeps expires_at (a key lives ttl from its first
        -- claim) unless its lease would outlive it: an in-flight row with
        -- a running lease is never absent, or a new claim would win while
        -- this holder still runs.
        IF p_takeover AND NOT v_row.fail_closed THEN
            UPDATE ONLY idempotency_keys k
               SET lease_token = p_token,
                   lease_until = v_now + p_lease_us * interval '1 microsecond',
                   fail_closed = p_hold,
                   expires_at  = greatest(k.expires_at, v_now + p_lease_us * interval '1 microsecond')
             WHERE k.tenant = p_tenant AND k.scope = p_scope AND k.key = p_key
               AND k.state = 'in_flight'
               AND NOT k.fail_closed
               AND k.lease_token = v_row.lease_token
               AND k.lease_until <= v_now;
            IF FOUND THEN
                r_outcome := 'took_over';
                EXIT;
            END IF;
        ELSE
            UPDATE ONLY idempotency_keys k
               SET state = 'indeterminate'
             WHERE k.tenant = p_tenant AND k.scope = p_scope AND k.key = p_key
               AND k.state = 'in_flight'
               AND k.lease_token = v_row.lease_token
               AND k.lease_until <= v_now
            RETURNING * INTO v_row;
            IF FOUND THEN
                r_outcome := 'lost';
                EXIT;
            END IF;
        END IF;
    END LOOP;

    IF r_outcome IS NULL THEN
        r_outcome := 'busy';
        RETURN;
    END IF;
    IF r_outcome IN ('won', 'took_over') THEN
        IF p_hold THEN
            -- This session holds both locks already (at transaction level),
            -- so these never wait.
            PERFORM pg_advisory_lock(v_req), pg_advisory_lock(v_lock);
        END IF;
        RETURN;
    END IF;

    r_state        := v_row.state;
    r_operation    := v_row.operation;
    r_fingerprint  := v_row.fingerprint;
    r_status       := v_row.status;
    r_headers      := v_row.headers;
    r_body         := v_row.body;
    r_body_omitted := v_row.body_omitted;
    IF v_row.state = 'in_flight' THEN
        r_lease_remaining_us := greatest(0,
            (extract(epoch FROM v_row.lease_until - v_now) * 1000000)::bigint);
    END IF;
END;
$$;

-- idempotency_complete stores the response of the claim held with p_token.
-- It raises SQLSTATE IK001 when the token is no longer current (another
-- request took the key over, or the row is gone) and changes nothing. The
-- error, rather than a row count, is what lets transactional mode send the
-- completion and COMMIT in one round trip: a fenced completion aborts the
-- transaction, so the handler's writes can never commit without it.
CREATE OR REPLACE FUNCTION idempotency_complete(
    p_tenant       text,
    p_scope        text,
    p_key          text,
    p_token        text,
    p_status       integer,
    p_headers      bytea,
    p_body         bytea,
    p_body_omitted boolean
) RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    UPDATE ONLY idempotency_keys k
       SET state        = 'completed',
           completed_at = clock_timestamp(),
           status       = p_status,
           headers      = p_headers,
           body         = p_body,
           body_omitted = p_body_omitted,
           lease_until  = NULL
     WHERE k.tenant = p_tenant AND k.scope = p_scope AND k.key = p_key
       AND k.lease_token = p_token
       AND k.state = 'in_flight';
    IF NOT FOUND THEN
        RAISE EXCEPTION 'idempotency key lease token is no longer current'
            USING ERRCODE = 'IK001';
    END IF;
END;
$$;

-- idempotency_sweep deletes at most p_limit expired rows and returns how
-- many it deleted. A row in flight under a running lease is never swept,
-- whatever its expiry. SKIP LOCKED passes over rows that a claim is replacing
-- right now (and rows another sweeper holds), so sweepers on every replica
-- can run at once and a claim waits at most for one bounded DELETE.
-- Operators who prefer to schedule it in the database can use pg_cron:
--
--   SELECT cron.schedule('idempotency-sweep', '* * * * *',
--                        $$SELECT idempotency_sweep(10000)$$);
CREATE OR REPLACE FUNCTION idempotency_sweep(p_limit integer)
RETURNS bigint
LANGUAGE sql VOLATILE
AS $$
    WITH doomed AS (
        SELECT k.tenant, k.scope, k.key
          FROM ONLY idempotency_keys k
         WHERE k.expires_at <= clock_timestamp()
           AND NOT (k.state = 'in_flight' AND k.lease_until > clock_timestamp())
         ORDER BY k.expires_at
         LIMIT p_limit
           FOR UPDATE SKIP LOCKED
    ), deleted AS (
        DELETE FROM ONLY idempotency_keys k
         USING doomed d
         WHERE k.tenant = d.tenant AND k.scope = d.scope AND k.key = d.key
        RETURNING 1
    )
    SELECT count(*) FROM deleted;
$$;
