package redisstore

import "github.com/redis/go-redis/v9"

// Every decision redisstore makes about a key is one of the Lua scripts
// below. Redis runs a script atomically: no other command touches the key
// between its first read and its last write, which is what makes a claim
// "one conditional insert" rather than "read, then write" (AWS Powertools'
// Redis layer claims with SET NX and then reads and overwrites in separate
// commands; that gap is where its users found double executions). Each
// script costs one round trip.
//
// One record is one Redis hash, named by Store.key; every script touches
// KEYS[1] only, so a record never spans hash slots. Its fields:
//
//	st   state: in_flight, completed or indeterminate, or released: a
//	     tombstone that claims treat as absent (releaseScript)
//	op   operation ID
//	fp   fingerprint (raw bytes)
//	tok  lease token of the current holder
//	tko  "1" when the current holder took the key over (see Retries)
//	fc   "1" when the claim that holds the key fails closed: once its
//	     lease runs out the record becomes indeterminate, whatever the
//	     mode of the claim that meets it
//	cn   the call that completed the record or marked it indeterminate
//	     (see Retries below)
//	lu   lease_until, µs since the Unix epoch
//	ex   expires_at, µs since the Unix epoch
//	tn   tenant, sp scope, ky key as stored: the identity the record's
//	     name hashes, kept so that an operator can list records (admin.go)
//	ca   created_at, µs since the Unix epoch: when the key was first claimed
//	ct   completed_at, µs since the Unix epoch (completed only)
//	sc   response status          (completed only)
//	hd   response headers, encoded by headerwire.Encode (completed only)
//	bd   response body, raw bytes (completed only)
//	om   "1" when the body was omitted (completed only)
//
// Time. Every script starts from the same preamble: now is Redis's own
// clock (TIME, frozen for the duration of a script), so that app servers
// with drifting clocks agree on leases and expiry. Only a test passes a
// clock of its own as ARGV[1]; production passes "". Times are integers
// of microseconds, which a Lua number (a double) holds exactly until the
// year 2255. Numbers are written with string.format('%d'): Redis turns a
// Lua number into a string with 14 significant digits, too few for them.
//
// Expiry. The hash carries its own PEXPIREAT, set to expires_at, so Redis
// deletes a record when its TTL ends and no sweeper is needed. Redis may
// delete an expired key lazily, so every script also compares ex with now
// itself: a record past ex counts as absent whether Redis has removed it
// yet or not. The deadline is rounded up to the millisecond, so Redis
// never removes a record before ex. Under a test clock Redis's deadline
// would mean nothing, so none is set: the scripts' own comparison expires
// records, and the test deletes them.
//
// Retries. A client library may send a script again when a connection
// breaks after the script ran but before its reply arrived (go-redis does,
// on EOF). So the scripts recognise their own earlier effect and answer as
// they did the first time: a claim that finds its own lease token in
// flight won, or took over when tko says so (a token is new with every
// claim); a completion or a fail-closed abandonment finds the nonce of its
// call in cn. A nonce, not the token, because a second Complete call of
// one holder must still be fenced. A release finds its nonce in the
// tombstone it left.
const preamble = `
local now
if ARGV[1] == '' then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
else
  now = tonumber(ARGV[1])
end
local function int(n) return string.format('%d', n) end
local function expireat(key, ex)
  if ARGV[1] == '' then
    redis.call('PEXPIREAT', key, int(math.ceil(ex / 1000)))
  end
end
`

// claimScript is the atomic claim.
//
//	KEYS[1] the record
//	ARGV    now-or-"", operation, fingerprint, token, lease µs, ttl µs,
//	        on-lease-expiry ("takeover" or "fail-closed"), tenant, scope,
//	        key
//
// It answers {"won"}, {"took_over"}, or {"lost", st, op, fp, lease
// remaining µs, sc, hd, bd, om} for the row that stands. Comparing the
// fingerprint and operation of a lost claim is the engine's job (422 on a
// mismatch whatever the state); the script compares them only where the
// contract says a row of another request must be left alone: an abandoned
// lease is taken over, or failed closed, only by the same request.
var claimScript = redis.NewScript(preamble + `
local key = KEYS[1]
local op, fp, tok = ARGV[2], ARGV[3], ARGV[4]
local lease, ttl, mode = tonumber(ARGV[5]), tonumber(ARGV[6]), ARGV[7]
local r = redis.call('HMGET', key, 'st', 'op', 'fp', 'tok', 'lu', 'ex', 'tko', 'fc')
local st = r[1]

if st == 'released' and r[4] == tok and tonumber(r[6]) > now then
  -- A copy of this claim that Redis runs after its holder released the
  -- key (a resend left in a broken connection behind the release). Its
  -- reply reaches nobody, and nobody holds the token any more: claiming
  -- again would hold the key until the lease ran out and then, failing
  -- closed, mark indeterminate a request that never ran.
  return {'lost', 'in_flight', r[2], r[3], '0'}
end

if not st or st == 'released' or tonumber(r[6]) <= now then
  -- Absent, released, or expired and so as good as absent: after its TTL
  -- the same key is a new request, whatever the old record held. DEL
  -- first, so that no field of the old record survives into the new one.
  -- A lease longer than the TTL keeps the record until the lease ends,
  -- as a takeover's does below: a running lease is never absent.
  local ex = now + math.max(ttl, lease)
  redis.call('DEL', key)
  redis.call('HSET', key, 'st', 'in_flight', 'op', op, 'fp', fp, 'tok', tok,
    'lu', int(now + lease), 'ex', int(ex), 'ca', int(now),
    'tn', ARGV[8], 'sp', ARGV[9], 'ky', ARGV[10])
  if mode ~= 'takeover' then redis.call('HSET', key, 'fc', '1') end
  expireat(key, ex)
  return {'won'}
end

local lu = tonumber(r[5])
if st == 'in_flight' and r[4] == tok then
  -- This very claim, sent again after its reply was lost: it answers as
  -- it did, a takeover included (the engine logs and counts those).
  if r[7] then return {'took_over'} end
  return {'won'}
end

if st == 'in_flight' and lu <= now and r[2] == op and r[3] == fp then
  -- A takeover needs both claims to allow it: the holder's claim may fail
  -- closed because it left effects that only it knew of.
  if mode == 'takeover' and not r[8] then
    -- The key lives ttl from its first claim, not from a takeover, except
    -- that an in-flight row whose lease runs is never absent: a lease that
    -- would outlive the record moves the record's end with it.
    lu = now + lease
    local ex = tonumber(r[6])
    redis.call('HSET', key, 'tok', tok, 'lu', int(lu), 'tko', '1')
    if lu > ex then
      redis.call('HSET', key, 'ex', int(lu))
      expireat(key, lu)
    end
    return {'took_over'}
  end
  -- The token goes with the lease: the abandoned holder can change
  -- nothing any more, not even by abandoning the key itself.
  redis.call('HSET', key, 'st', 'indeterminate', 'tok', '')
  st = 'indeterminate'
end

local left = 0
if st == 'in_flight' and lu > now then left = lu - now end
if st == 'completed' then
  local c = redis.call('HMGET', key, 'sc', 'hd', 'bd', 'om')
  return {'lost', st, r[2], r[3], int(left), c[1], c[2], c[3], c[4]}
end
return {'lost', st, r[2], r[3], int(left)}
`)

// held is the fencing test every other script starts with: the record
// exists, has not expired, is in flight, and token holds it. Only the
// holder of the current lease token may change a claim.
const held = `
local key, tok = KEYS[1], ARGV[2]
local r = redis.call('HMGET', key, 'st', 'tok', 'ex', 'cn')
local live = r[1] and tonumber(r[3]) > now and tok ~= '' and r[2] == tok
`

// completeScript stores the response of the claim held with ARGV[2].
//
//	ARGV  now-or-"", token, nonce, status, headers, body, omitted ("1"
//	      or "0")
//
// It answers 1 when stored (or already stored by this call) and 0 when
// fenced. The lease ends with the completion; the expiry stays.
var completeScript = redis.NewScript(preamble + held + `
if live and r[1] == 'completed' and r[4] == ARGV[3] then return 1 end
if not (live and r[1] == 'in_flight') then return 0 end
redis.call('HSET', key, 'st', 'completed', 'lu', '0', 'cn', ARGV[3], 'ct', int(now),
  'sc', ARGV[4], 'hd', ARGV[5], 'bd', ARGV[6], 'om', ARGV[7])
return 1
`)

// releaseScript frees the claim held with ARGV[2], so that a retry runs
// the handler again. It answers 1 (also when sent again after its reply
// was lost: ARGV[3], the call's nonce, is in cn), or 0 when fenced.
//
// It leaves a tombstone rather than deleting the key: state released, the
// token and the nonce kept, until the record's own expiry. Every claim
// treats it as absent, except a copy of the released claim itself, which
// must not win again (see claimScript).
//
// A release that finds no record (or an expired one) answers fenced, but
// still leaves a tombstone of its token for ARGV[4] µs: the engine
// releases a claim whose call failed, and that claim may not have run
// yet; a copy of it still in a broken connection must not win the key
// after the release, for a holder that is gone.
var releaseScript = redis.NewScript(preamble + held + `
if live and r[1] == 'released' and r[4] == ARGV[3] then return 1 end
if tok ~= '' and (not r[1] or tonumber(r[3]) <= now) then
  local ex = now + tonumber(ARGV[4])
  redis.call('DEL', key)
  redis.call('HSET', key, 'st', 'released', 'tok', tok, 'lu', '0', 'ex', int(ex))
  expireat(key, ex)
  return 0
end
if not (live and r[1] == 'in_flight') then return 0 end
redis.call('HDEL', key, 'tko')
redis.call('HSET', key, 'st', 'released', 'lu', '0', 'cn', ARGV[3])
return 1
`)

// abandonScript applies the mode to the claim held with the token at once,
// as if its lease had run out: "takeover" ends the lease, so the next claim
// of the same request takes the key over; "fail-closed" marks the key
// indeterminate for an operator. It answers 1, or 0 when fenced; a
// fail-closed abandonment sent again after its reply was lost answers 1.
//
//	ARGV  now-or-"", token, nonce, mode
var abandonScript = redis.NewScript(preamble + held + `
if live and r[1] == 'indeterminate' and r[4] == ARGV[3] then return 1 end
if not (live and r[1] == 'in_flight') then return 0 end
if ARGV[4] == 'takeover' then
  redis.call('HSET', key, 'lu', int(now))
else
  redis.call('HSET', key, 'st', 'indeterminate', 'cn', ARGV[3])
end
return 1
`)
