package idemclient_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/idemgen/idemgen/runtime/idemclient"
	"github.com/idemgen/idemgen/runtime/key"
)

func ExampleNew() {
	attempts := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		attempts++
		if attempts == 1 {
			// The first attempt meets a passing failure.
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		fmt.Println("key sent on the retry:", r.Header.Get("Idempotency-Key"))
		w.WriteHeader(http.StatusCreated)
	}))
	defer srv.Close()

	t, err := idemclient.New(idemclient.Config{
		// The generated ClientOperations() in a real client.
		Operations: []idemclient.Operation{{
			ID: "createOrder", Method: http.MethodPost, Path: "/orders",
			Key: idemclient.Key{In: key.InHeader, Name: "Idempotency-Key"},
			TTL: 24 * time.Hour,
		}},
		BackoffBase: time.Millisecond,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx := idemclient.WithKey(context.Background(), "order-42")
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/orders", strings.NewReader(`{"item":"lamp"}`))
	res, err := t.Client().Do(req)
	if err != nil {
		fmt.Println(err)
		return
	}
	res.Body.Close()
	fmt.Println(res.StatusCode, "after", attempts, "attempts")
	// Output:
	// key sent on the retry: order-42
	// 201 after 2 attempts
}
