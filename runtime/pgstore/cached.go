package pgstore

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// pgx keeps, with each connection, what it learnt of a statement's text
// the first time it ran it there: in its statement cache (pgx's default
// mode) the statement it prepared, whose parameter types, result columns
// and parse stay fixed for as long as it is cached; in its description
// cache (cache_describe) the parameter types and result columns, which
// every later run of the text sends along. A handler runs inside a session
// it can change (a temporary view that stands for a table, search_path,
// DateStyle, standard_conforming_strings), so whatever pgx prepared or
// described for it there would be used, unchecked, by every later request
// on the connection that runs the same text: the application's own query,
// whose $1 a handler made a name (63 bytes), would match rows of another
// tenant's.
//
// So nothing pgx learnt in a handler's session outlives its request. Once
// the session is reset, the texts pgx cached while the handler ran are
// forgotten and prepared (or described) again, in the clean session; a
// text that does not parse there (it needs the handler's temporary table)
// stays forgotten. Which texts those are:
//
//   - in the statement cache, those whose statement the session lists as
//     prepared since the handler's transaction began (cachedSince, asked
//     in the same round trip as the session check): whatever ran them,
//     the handler's queries, large objects, COPY;
//   - in the description cache, which leaves no trace on the session,
//     every text the handler ran in a mode that describes (handlerTx
//     records them, as a QueryRewriter of the handler's rewrote them):
//     this costs a round trip per request for a handler that runs
//     statements on a pool in cache_describe mode.
//
// A text cached before the handler ran is left as it was in the statement
// cache: the handler's run of it prepares nothing.

// cachedSinceSQL aggregates, over pg_prepared_statements, one JSON array
// of pairs (NULL for none): the name and the text of every statement that
// pgx's statement cache prepared on the session at or after $3, a
// timestamptz: the start of a handler's transaction. It is a column of
// sessionCheckSQL. Each text
// comes as its UTF-8 bytes in base64, whatever the session's
// client_encoding: the check runs before the reset, under a
// client_encoding the handler may have set for the session, in which a
// text outside ASCII would come back as other bytes than pgx's.
const cachedSinceSQL = `pg_catalog.json_agg(pg_catalog.json_build_array(name,
            pg_catalog.encode(pg_catalog.convert_to(statement, 'UTF8'), 'base64')))
          FILTER (WHERE NOT from_sql AND name OPERATOR(pg_catalog.~~) 'stmtcache\_%'
                    AND prepare_time OPERATOR(pg_catalog.>=) $3::pg_catalog.timestamptz)::pg_catalog.text`

// cacheName is the name under which pgx's statement cache prepares sql:
// its prefix, then the hex of the first 24 bytes of the text's SHA-256.
func cacheName(sql string) string {
	sum := sha256.Sum256([]byte(sql))
	return cachePrefix + hex.EncodeToString(sum[:24])
}

// errCacheNameTaken is why a session where a statement was prepared under
// the cache name of another text is closed: pgx would run it for that
// text.
var errCacheNameTaken = errors.New("a statement was prepared in the handler's session under the statement cache's name of another text; the session is not reused")

// handlerCache returns what the handler of a transaction that began at
// began, by the database's clock, will tell about pgx's caches.
func (s *Store) handlerCache(began time.Time) *handlerCache {
	return &handlerCache{began: began, describes: s.describes}
}

// handlerCache is what a handler's transaction, and its nested ones, tell
// the end of the transaction about pgx's caches.
type handlerCache struct {
	// began is when the transaction began, by the database's clock; zero
	// for a transaction whose handler never ran.
	began time.Time
	// describes is set when the pool describes rather than prepares
	// (cache_describe).
	describes bool

	mu sync.Mutex
	// texts are the texts pgx may have cached for the handler: those the
	// handler ran in a mode that describes, and those the session check
	// found prepared (checked is then set).
	texts   []string
	checked bool
}

// add records texts.
func (c *handlerCache) add(texts ...string) {
	c.mu.Lock()
	c.texts = append(c.texts, texts...)
	c.mu.Unlock()
}

// found records the texts the session check found prepared since the
// transaction began (cachedSinceSQL), or NULL (nil). A statement under the
// cache name of another text than its own was not prepared by pgx, and
// stands in for pgx's statement of that other text: errCacheNameTaken.
func (c *handlerCache) found(list []byte) error {
	var pairs [][2]string
	if list != nil {
		if err := json.Unmarshal(list, &pairs); err != nil {
			return fmt.Errorf("the statements prepared in the handler's session: %w", err)
		}
	}
	texts := make([]string, len(pairs))
	for i, p := range pairs {
		text, err := base64.StdEncoding.DecodeString(p[1])
		if err != nil {
			return fmt.Errorf("the statements prepared in the handler's session: %w", err)
		}
		if texts[i] = string(text); cacheName(texts[i]) != p[0] {
			return fmt.Errorf("%w: %s", errCacheNameTaken, p[0])
		}
	}
	c.mu.Lock()
	c.texts = append(c.texts, texts...)
	c.checked = true
	c.mu.Unlock()
	return nil
}

// take returns the texts, each once, and whether the session check ran;
// it forgets both.
func (c *handlerCache) take() ([]string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	texts, checked := c.texts, c.checked
	c.texts, c.checked = nil, false
	slices.Sort(texts)
	return slices.Compact(texts), checked
}

// ran records sql, which the handler runs with args, whose leading
// options option tells (withheld.go), when pgx may describe it in its
// description cache (in cache_describe mode, the pool's or one the
// options choose), and returns the args to run it with: a copy of the
// handler's, in which every rewriter among the options gets no
// connection, and the text that the one pgx calls rewrites sql to is the
// one recorded; a rewriter refuses its statement if calls closed while it
// ran (handlerRewrite). The copy is made before anything is read of args:
// what pgx is given is what was checked, whatever a goroutine of the
// handler's writes to its slice meanwhile.
func (c *handlerCache) ran(sql string, args []any, option func(any) bool, calls *handlerCalls) []any {
	args = slices.Clone(args)
	c.ranOwn(sql, args, option, calls)
	return args
}

// ranOwn is ran on args of pgstore's own, which it changes in place.
func (c *handlerCache) ranOwn(sql string, args []any, option func(any) bool, calls *handlerCalls) {
	describes, rewrites := c.describes, false
	for _, a := range args {
		if !option(a) {
			break
		}
		switch a := a.(type) {
		case pgx.QueryExecMode:
			describes = a == pgx.QueryExecModeCacheDescribe
		case pgx.QueryRewriter:
			rewrites = true
		}
	}
	var record *handlerCache
	if describes {
		record = c
		if !rewrites {
			c.add(sql)
		}
	}
	withholdRewriters(args, option, record, calls)
}

// ranBatch records the texts of b as ran does, and has its queries'
// rewriters called without the connection; a batch runs in the pool's
// mode. b is pgstore's copy of the handler's batch (withheldBatch), its
// queries' arguments copies too.
func (c *handlerCache) ranBatch(b *pgx.Batch, calls *handlerCalls) {
	if b == nil {
		return
	}
	for _, q := range b.QueuedQueries {
		c.ranOwn(q.SQL, q.Arguments, batchOption, calls)
	}
}

// ranCopy records the text with which pgx describes the table of a COPY.
func (c *handlerCache) ranCopy(table pgx.Identifier, columns []string) {
	if !c.describes {
		return
	}
	quoted := make([]string, len(columns))
	for i, col := range columns {
		quoted[i] = `"` + strings.ReplaceAll(col, `"`, `""`) + `"`
	}
	c.add("select " + strings.Join(quoted, ", ") + " from " + table.Sanitize())
}

// ranLargeObjects records the texts that pgx's large objects run.
func (c *handlerCache) ranLargeObjects() {
	if !c.describes {
		return
	}
	c.add("select lo_create($1)", "select lo_open($1, $2)", "select lo_unlink($1)",
		"select lowrite($1, $2)", "select loread($1, $2)", "select lo_lseek64($1, $2, $3)",
		"select lo_tell64($1)", "select lo_truncate64($1, $2)", "select lo_close($1)")
}

// refreshCached makes pgx forget what it cached of the texts h's handler
// may have had it cache, and caches them again, in the session pc now
// has: a reset one. When the session check did not run (the session was
// given back after an error), the statements prepared since the
// transaction began are asked for first.
func refreshCached(ctx context.Context, pc *pgx.Conn, h *handlerTx) error {
	c := h.cache
	texts, checked := c.take()
	if !checked && !c.began.IsZero() {
		// The session is clean by now: the check is parsed afresh, and
		// only its list of statements is read (it seeds random() afresh
		// again, as every reset does).
		seed := strconv.FormatFloat(newSeed(), 'g', -1, 64)
		args := [][]byte{[]byte(pc.Config().User), []byte(seed), []byte(c.began.Format(time.RFC3339Nano)), []byte("0")}
		res := pc.PgConn().ExecParams(ctx, sessionCheckSQL, args, nil, nil, nil).Read()
		if res.Err == nil && (len(res.Rows) != 1 || len(res.Rows[0]) < 4) {
			res.Err = fmt.Errorf("%d rows where one of at least 4 columns was due", len(res.Rows))
		}
		if res.Err != nil {
			return fmt.Errorf("asking for the statements prepared in the handler's session: %w", res.Err)
		}
		if err := c.found(res.Rows[0][3]); err != nil {
			return err
		}
		texts, _ = c.take()
	}
	if len(texts) == 0 {
		return nil
	}
	for _, sql := range texts {
		if err := forget(ctx, pc, sql); err != nil {
			return err
		}
	}
	return recache(ctx, pc, texts)
}

// errForget is forgetting's answer to every query.
var errForget = errors.New("pgstore: forgetting what pgx cached of a statement")

// forgetting is a QueryRewriter that fails: pgx then forgets what it
// cached of the query's text, in both its caches, having sent nothing.
// The statement itself goes when pgx next runs a query on the connection.
type forgetting struct{}

// RewriteQuery returns errForget.
func (forgetting) RewriteQuery(context.Context, *pgx.Conn, string, []any) (string, []any, error) {
	return "", nil, errForget
}

// forget makes pgx forget what it cached of sql on pc.
func forget(ctx context.Context, pc *pgx.Conn, sql string) error {
	rows, err := pc.Query(ctx, sql, forgetting{})
	rows.Close()
	if err != nil && !errors.Is(err, errForget) {
		return fmt.Errorf("forgetting a statement the handler's session prepared: %w", err)
	}
	return nil
}

// recacheSQL heads the batch with which recache has pgx prepare texts: it
// takes no parameter, and is queued with one, so that pgx, once it has
// prepared every text of the batch, refuses to run any.
const recacheSQL = `SELECT`

// recache has pgx prepare (or describe) texts on pc and cache them,
// without running any: a batch whose first statement's arguments do not
// fit is refused once its statements are prepared, and pgx keeps them, in
// one round trip (and one to deallocate what pgx forgot). A text that does
// not parse in the clean session (it needs a temporary table of the
// handler's) is left out, and stays forgotten: pgx prepares it where it
// next runs. The first such text makes recache look for every other one,
// in one round trip, and try the others again; the texts found stay known
// on the connection (unparsed), and are not tried again there.
func recache(ctx context.Context, pc *pgx.Conn, texts []string) error {
	known := unparsed(pc.PgConn())
	texts = slices.DeleteFunc(texts, func(sql string) bool { return known[sql] })
	for len(texts) > 0 {
		failed, err := prepareAll(ctx, pc, texts)
		if err != nil || failed == "" {
			return err
		}
		bad, err := parseFailures(ctx, pc.PgConn(), texts)
		if err != nil {
			return err
		}
		// Another session may have dropped what failed meanwhile: it is
		// left out all the same.
		bad[failed] = true
		known.add(bad)
		texts = slices.DeleteFunc(texts, func(sql string) bool { return bad[sql] })
	}
	return nil
}

// prepareAll has pgx prepare texts on pc in one batch, as recache says,
// and returns the first text that did not parse ("" if every one did).
func prepareAll(ctx context.Context, pc *pgx.Conn, texts []string) (failed string, err error) {
	b := &pgx.Batch{}
	b.Queue(recacheSQL, nil)
	for _, sql := range texts {
		b.Queue(sql)
	}
	err = pc.SendBatch(ctx, b).Close()
	var pre pgx.ErrPreprocessingBatch
	var pgErr *pgconn.PgError
	switch {
	case err == nil:
		return "", errors.New("recaching statements: the batch ran")
	case !errors.As(err, &pre):
		return "", fmt.Errorf("recaching statements: %w", err)
	case pre.SQL() == recacheSQL:
		return "", nil
	case !errors.As(err, &pgErr) || !slices.Contains(texts, pre.SQL()):
		return "", fmt.Errorf("recaching statements: %w", err)
	}
	return pre.SQL(), nil
}

// parseFailures returns those of texts that do not parse on pc, each
// tried on its own in the unnamed statement, in one round trip.
func parseFailures(ctx context.Context, pc *pgconn.PgConn, texts []string) (map[string]bool, error) {
	p := pc.StartPipeline(ctx)
	for _, sql := range texts {
		p.SendPrepare("", sql, nil)
		p.SendPipelineSync()
	}
	bad := make(map[string]bool)
	err := p.Flush()
	for i := 0; err == nil && i < len(texts); i++ {
		var pgErr *pgconn.PgError
		if _, err = p.GetResults(); errors.As(err, &pgErr) {
			bad[texts[i]], err = true, nil
		}
		if err == nil {
			var res any
			if res, err = p.GetResults(); err == nil {
				if _, ok := res.(*pgconn.PipelineSync); !ok {
					err = fmt.Errorf("%T where the pipeline's sync was due", res)
				}
			}
		}
	}
	if cerr := p.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, fmt.Errorf("looking for the statements that do not parse: %w", err)
	}
	return bad, nil
}

// unparsedKey keys, in a connection's custom data, the texts that did not
// parse there once the session was reset (unparsedTexts).
const unparsedKey = "idemgen/pgstore.unparsed"

// unparsedCap bounds the texts a connection keeps as unparsed: once
// that many are kept, they are forgotten and tried again.
const unparsedCap = 256

// unparsedTexts are texts that did not parse in a clean session on a
// connection: statements on a temporary table that a handler makes for
// its own transaction (ON COMMIT DROP).
type unparsedTexts map[string]bool

// unparsed returns the texts kept as unparsed on pc.
func unparsed(pc *pgconn.PgConn) unparsedTexts {
	data := pc.CustomData()
	known, ok := data[unparsedKey].(unparsedTexts)
	if !ok {
		known = make(unparsedTexts)
		data[unparsedKey] = known
	}
	return known
}

// add keeps texts.
func (u unparsedTexts) add(texts map[string]bool) {
	if len(u)+len(texts) > unparsedCap {
		clear(u)
	}
	for sql := range texts {
		if len(u) < unparsedCap {
			u[sql] = true
		}
	}
}
