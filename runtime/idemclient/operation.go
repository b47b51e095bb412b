package idemclient

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/idemgen/idemgen/runtime/key"
	"github.com/idemgen/idemgen/runtime/pathtemplate"
)

// Key names where an operation's key is carried.
type Key struct {
	In key.In
	// Name is the header or query-parameter name, or for a body key the
	// JSON Pointer of the property ("/idempotency_key").
	Name string
}

// Operation is what a client needs to know of one idempotent operation.
// The generator writes the table of them (ClientOperations); it holds no
// server-only detail.
type Operation struct {
	// ID is the operation's operationId.
	ID string
	// Method is the HTTP method, POST or PATCH.
	Method string
	// Path is the OpenAPI path template, such as "/pets/{pet_id}/adoptions".
	Path string
	// Key is where the key is carried.
	Key Key
	// KeyMaxLength is the longest key the server accepts; zero is
	// key.MaxLength, the extension's default. A key the Transport draws is
	// cut to it; New refuses one below 16, too short for a drawn key.
	KeyMaxLength int
	// TTL is how long the server remembers a key after its first use; a
	// retry after that is a new request.
	TTL time.Duration
	// RetryBudget is the spec's clientRetryBudget, the longest a client
	// may keep retrying; zero when the spec sets none.
	RetryBudget time.Duration
	// Unprotected marks an operation without a policy that the table
	// holds because a protected template of its method also matches its
	// paths and it is the more specific (POST /pay/batch beside a
	// protected POST /pay/{id}): the server's router sends such a request
	// to its own handler, which no key protects, so the Transport sends it
	// once, as it is. Only ID, Method and Path are set.
	Unprotected bool
}

// defaultKeyMaxLength is the extension's default keyMaxLength.
const defaultKeyMaxLength = key.MaxLength

// route is an operation with its parsed template.
type route struct {
	op   Operation
	tmpl *pathtemplate.Template
}

// router finds the operation a request calls.
type router struct {
	prefix []string // the base path's segments, escaped
	routes []route  // sorted by pathtemplate.Less: the most specific first
}

func newRouter(basePath string, ops []Operation) (*router, error) {
	r := &router{}
	if p := strings.TrimSuffix(basePath, "/"); p != "" {
		segs, ok := pathtemplate.Split(p)
		if !ok {
			return nil, fmt.Errorf("base path %q does not start with /", basePath)
		}
		r.prefix = segs
	}
	seen := make(map[string]bool)
	for _, op := range ops {
		if op.Method == "" || op.Path == "" {
			return nil, fmt.Errorf("operation %q: method and path are required", op.ID)
		}
		if !op.Unprotected {
			var err error
			if op, err = checkOperation(op); err != nil {
				return nil, err
			}
		}
		if err := r.add(op, seen); err != nil {
			return nil, err
		}
	}
	slices.SortStableFunc(r.routes, func(a, b route) int {
		switch {
		case pathtemplate.Less(a.tmpl, b.tmpl):
			return -1
		case pathtemplate.Less(b.tmpl, a.tmpl):
			return 1
		}
		return 0
	})
	return r, nil
}

// checkOperation checks a protected operation of the table and fills in
// its default key length.
func checkOperation(op Operation) (Operation, error) {
	if op.Method != http.MethodPost && op.Method != http.MethodPatch {
		// The engine refuses a policy on any other method, "post"
		// included: no request would reach such an operation.
		return op, fmt.Errorf("operation %q: method %q cannot carry a policy; only POST and PATCH", op.ID, op.Method)
	}
	switch op.Key.In {
	case key.InHeader, key.InQuery, key.InBody:
	default:
		return op, fmt.Errorf("operation %q: key source %q is not header, query or body", op.ID, op.Key.In)
	}
	if op.Key.Name == "" {
		return op, fmt.Errorf("operation %q: the key has no name", op.ID)
	}
	if op.TTL <= 0 {
		return op, fmt.Errorf("operation %q: TTL must be positive", op.ID)
	}
	if op.KeyMaxLength == 0 {
		op.KeyMaxLength = defaultKeyMaxLength
	}
	if op.KeyMaxLength < minFreshKey {
		return op, fmt.Errorf("operation %q: keyMaxLength %d is shorter than the %d characters of the keys the Transport draws (80 random bits); allow keys of at least %d characters", op.ID, op.KeyMaxLength, minFreshKey, minFreshKey)
	}
	return op, nil
}

// add adds an operation of the table, refusing one whose method and path
// are in the table already.
func (r *router) add(op Operation, seen map[string]bool) error {
	t, err := pathtemplate.Parse(op.Path)
	if err != nil {
		return fmt.Errorf("operation %q: %w", op.ID, err)
	}
	id := strings.ToUpper(op.Method) + " " + op.Path
	if seen[id] {
		return fmt.Errorf("operation %q: %s is in the table twice", op.ID, id)
	}
	seen[id] = true
	r.routes = append(r.routes, route{op: op, tmpl: t})
	return nil
}

// find returns the protected operation req calls, or nil: nil both for a
// request the table does not know and for one to an Unprotected route.
func (r *router) find(req *http.Request) *Operation {
	op := r.match(req)
	if op == nil || op.Unprotected {
		return nil
	}
	return op
}

// match returns the operation of the table req calls, an Unprotected one
// included, or nil when the table does not know it. The path is matched
// the way the server's router reads it: segment by segment, each
// percent-decoded on its own, below the base path. It reads the path the
// transport sends (pathtemplate.RequestPath): a RawPath that is no valid
// spelling of the path is not sent as written.
func (r *router) match(req *http.Request) *Operation {
	path, _ := pathtemplate.RequestPath(req.URL)
	segs, ok := pathtemplate.Split(path)
	if !ok {
		return nil
	}
	if len(segs) < len(r.prefix) {
		return nil
	}
	for i, p := range r.prefix {
		if pathtemplate.Decode(segs[i]) != pathtemplate.Decode(p) {
			return nil
		}
	}
	segs = segs[len(r.prefix):]
	for i := range r.routes {
		rt := &r.routes[i]
		// Methods are case-sensitive (RFC 9110 §9.1), as the engine
		// reads them: "post" is no POST and carries no policy.
		if rt.op.Method != req.Method {
			continue
		}
		if _, ok := rt.tmpl.Match(segs); ok {
			return &rt.op // the most specific route, protected or not
		}
	}
	return nil
}
