-- Idempotency keys for PostgreSQL (runtime/pgstore).
--
-- Applying this file twice is harmless: every object is created with
-- IF NOT EXISTS or CREATE OR REPLACE. The functions refer to the table by
-- its plain name, so create them in the schema that holds the table and call
-- them with that schema on the search_path.

-- One row per (tenant, scope, key): the primary key is the database UNIQUE
-- constraint that makes a key mean one request. Times come from the
-- database clock only; the application sends durations, never timestamps,
-- so that replicas with drifting clocks agree on leases and expiry.
--
-- fillfactor leaves room on each page so that the completion UPDATE, which
-- touches no indexed column, can stay a HOT update on the same page.
--
-- The key columns compare bytewise (COLLATE "C"): they are identifiers, not
-- words, and every claim walks the primary key, where a linguistic
-- collation would pay for a locale-aware comparison at every step.
CREATE TABLE IF NOT EXISTS idempotency_keys (
    tenant       text        COLLATE "C" NOT NULL,
    -- The operation ID for scope "operation", '' for scope "tenant".
    scope        text        COLLATE "C" NOT NULL,
    key          text        COLLATE "C" NOT NULL,
    operation    text        NOT NULL,
    -- SHA-256 of the request's canonical form.
    fingerprint  bytea       NOT NULL,
    state        text        NOT NULL
                 CHECK (state IN ('in_flight', 'completed', 'indeterminate')),
    -- Only the holder of lease_token may complete, release or abandon the
    -- row (fencing); a takeover replaces it.
    lease_token  text,
    lease_until  timestamptz,
    -- True when the claim that holds the row fails closed: once its lease
    -- runs out the row becomes indeterminate, whatever the lease-expiry
    -- mode of the claim that meets it. A claim committed before its
    -- handler runs (durable mode) may leave effects behind, and the next
    -- process to meet it, after a restart or on another replica, may not
    -- know that. A transactional claim's row is one too: it is seen in
    -- flight only if its handler committed it (see idempotency_claim).
    fail_closed  boolean     NOT NULL DEFAULT false,
    expires_at   timestamptz NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT clock_timestamp(),
    completed_at timestamptz,
    status       integer,
    -- The replayable response headers as length-prefixed bytes (names and
    -- values), not JSON: a header value may hold NUL or bytes that are not
    -- UTF-8, and must replay byte for byte.
    headers      bytea,
    body         bytea,
    -- True when the body was larger than the policy's snapshot limit: the
    -- record is completed without it and replays answer 409.
    body_omitted boolean     NOT NULL DEFAULT false,
    PRIMARY KEY (tenant, scope, key)
) WITH (fillfactor = 80);

-- The sweeper finds expired rows through this index.
CREATE INDEX IF NOT EXISTS idempotency_keys_expires_at_idx
    ON idempotency_keys (expires_at);

-- idempotency_lock_id is the advisory lock id of a key: every write a
-- claim makes to the key happens while it holds this lock (see
-- idempotency_claim). The lengths make the hashed text unambiguous whatever
-- the parts contain, and the table's oid as the seed keeps two schemas of
-- one database apart.
CREATE OR REPLACE FUNCTION idempotency_lock_id(p_tenant text, p_scope text, p_key text)
RETURNS bigint
LANGUAGE sql STABLE
AS $$
    SELECT hashtextextended(
        length(p_tenant) || ':' || p_tenant || length(p_scope) || ':' || p_scope || p_key,
        'idempotency_keys'::regclass::oid::bigint)
$$;

-- idempotency_request_lock_id is the advisory lock id of one request for a
-- key: the key and what makes a request the same (operation and
-- fingerprint). A claim takes it before the key's lock and holds it as
-- long, so a claim that gets this lock but not the key's knows that the
-- key is held by another request (see idempotency_claim, 'busy_other').
CREATE OR REPLACE FUNCTION idempotency_request_lock_id(
    p_tenant text, p_scope text, p_key text, p_operation text, p_fingerprint bytea)
RETURNS bigint
LANGUAGE sql STABLE
AS $$
    SELECT hashtextextended(
        length(p_tenant) || ':' || p_tenant || length(p_scope) || ':' || p_scope
        || length(p_key) || ':' || p_key || length(p_operation) || ':' || p_operation
        || encode(p_fingerprint, 'hex'),
        'idempotency_keys'::regclass::oid::bigint)
$$;

-- idempotency_claim is the atomic claim: one call, one round trip, never a
-- wait on another claim. It returns one row whose r_outcome is
--   'won'       the caller holds the key with p_token (a new or expired row);
--   'took_over' the caller holds it after an abandoned claim's lease ran out;
--   'lost'      a live row stands; the r_* columns describe it (replay,
--               in flight, or indeterminate, possibly just marked so here);
--   'mismatch'  a live row of another request (fingerprint or operation);
--   'busy'      a claimant of the same request (operation and fingerprint)
--               holds the key right now and its row is not visible yet:
--               answer "in flight" and let the client retry shortly. The
--               r_* columns are NULL.
--   'busy_other' a claimant of another request holds the key right now and
--               its row is not visible yet: the key is in flight for a
--               different request (a 422 for the caller, docs/semantics.md
--               §5.1), although which operation and fingerprint it holds
--               cannot be read. The r_* columns are NULL. PostgreSQL frees
--               a session's locks one at a time, so a claimant of this
--               very request that is letting go can look so for a moment:
--               pgstore looks again before it answers 422 (its settleSQL).
--
-- pgstore calls it only after a plain read in the same statement found no
-- row that decides the claim (see pgstore's claimSQL), so the function
-- starts with the write that a new key needs; called on its own it is just
-- as complete.
--
-- Why a function and not one INSERT ... ON CONFLICT statement: a single
-- statement runs on one snapshot. "INSERT ... ON CONFLICT DO NOTHING" plus a
-- read of the row in the same statement (a CTE or a UNION) cannot see a row
-- that another session committed after the statement began: the insert
-- meets the conflict, does nothing, and the read finds nothing either, so
-- the claim would report neither a win nor the row that beat it. In a
-- VOLATILE plpgsql function under READ COMMITTED every statement takes a
-- fresh snapshot, so after a lost insert the next SELECT sees the winner.
-- Under REPEATABLE READ or SERIALIZABLE the statements would share one
-- snapshot, so the function refuses to run there.
--
-- Why an advisory lock: every write a claim makes to a key (insert, replace
-- an expired row, take over, fail closed) happens while it holds a
-- transaction-scoped advisory lock on the key, taken with
-- pg_try_advisory_xact_lock, which never waits. A claim made inside a
-- handler's transaction (pgstore's transactional mode) keeps that lock, and
-- its uncommitted in_flight row, until the transaction ends: other sessions
-- cannot see the row, they meet the lock and answer "busy" instead of
-- blocking on the row. If the process dies, PostgreSQL aborts the
-- transaction and both vanish, so the client's next retry runs at once. For
-- a claim outside a transaction the lock lasts only for this call. The lock
-- id is a 64-bit hash of the key (idempotency_lock_id).
--
-- Before the key's lock a claim takes the lock of its request
-- (idempotency_request_lock_id) the same way. A claim that gets its
-- request's lock but not the key's therefore knows that the key is held by
-- another request, even though that request's row is invisible inside its
-- open transaction: it answers 'busy_other', and the caller a 422 rather
-- than a 409. A claim that cannot get its request's lock meets its own
-- request in flight ('busy'). A hash collision makes a claim answer 'busy'
-- once, or, with odds of one in 2^64 per pair of concurrent keys, a 422.
--
-- p_takeover is the claim's lease-expiry mode: what it does to an abandoned
-- claim of the same request whose lease ran out (take it over, or mark it
-- indeterminate). A won claim records it in the row (fail_closed), and a
-- row that fails closed is never taken over, whichever mode meets it.
--
-- p_hold (transactional mode) makes a won claim also take both locks at
-- session level. They then outlive the transaction if the handler ends it
-- with a raw COMMIT or ROLLBACK, so that no other claim can write the key
-- until pgstore has seen what the handler did, left the key indeterminate
-- if it cannot tell, and unlocked them. A held claim's row also fails
-- closed whatever p_takeover says: pgstore commits it only completed, so a
-- row of it that others ever see in flight was committed by the handler
-- itself, together with some of its writes, by a process that died before
-- it could settle the key. A crash that leaves the transaction open rolls
-- the row back, and the retry wins the key afresh.
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
        UPDATE idempotency_keys k
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
          FROM idempotency_keys k
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
            UPDATE idempotency_keys k
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
            UPDATE idempotency_keys k
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
    UPDATE idempotency_keys k
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
          FROM idempotency_keys k
         WHERE k.expires_at <= clock_timestamp()
           AND NOT (k.state = 'in_flight' AND k.lease_until > clock_timestamp())
         ORDER BY k.expires_at
         LIMIT p_limit
           FOR UPDATE SKIP LOCKED
    ), deleted AS (
        DELETE FROM idempotency_keys k
         USING doomed d
         WHERE k.tenant = d.tenant AND k.scope = d.scope AND k.key = d.key
        RETURNING 1
    )
    SELECT count(*) FROM deleted;
$$;
