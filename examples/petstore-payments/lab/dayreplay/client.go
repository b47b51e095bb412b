package dayreplay

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// Client names the retry policy the day's clients follow. Every figure a
// day reports names the policy that produced it.
type Client string

// The client policies.
const (
	// Idemclient is idemgen's own client (runtime/idemclient): exponential
	// backoff with full jitter from 50 ms to 1 s, never shorter than
	// Retry-After, and one attempt timeout per logical request, drawn
	// between Timeout and TimeoutMax.
	Idemclient Client = "idemclient"
	// Independent is a client idemgen did not grow up with, as many real
	// ones are (independent.go): each attempt's timeout drawn anew between
	// Timeout and TimeoutMax; after a timeout or an error a jittered
	// exponential backoff, 25 ms doubling to a 1 s cap, drawn from its
	// upper half; after a 409, 429, 503 or 5xx carrying Retry-After the
	// larger of that backoff and the hint, the hint capped at 2 s.
	Independent Client = "independent"
)

// Clients are the client policies, each of which the days play.
var Clients = []Client{Idemclient, Independent}

func (c Client) valid() error {
	for _, k := range Clients {
		if c == k {
			return nil
		}
	}
	return fmt.Errorf("client %q: want idemclient or independent", string(c))
}

// postWith sends one POST through client, with key as its
// Idempotency-Key unless key is empty (idemclient sets its own), and
// returns the answer and its header.
func (r *replayer) postWith(ctx context.Context, client *http.Client, tenant int, path, body, key string) (answer, http.Header, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.base+path, strings.NewReader(body))
	if err != nil {
		return answer{}, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+r.keys[tenant])
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	res, err := client.Do(req)
	if err != nil {
		return answer{}, nil, err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	return answer{status: res.StatusCode, body: b}, res.Header, err
}

// client is c's policy, Idemclient when unset.
func (c Config) client() Client {
	if c.Client == "" {
		return Idemclient
	}
	return c.Client
}
