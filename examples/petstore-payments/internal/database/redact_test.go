package database

import (
	"context"
	"strings"
	"testing"
)

func TestRedact(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"postgres://app:s3cret@db.internal:5432/payments", "postgres://app:xxxxx@db.internal:5432/payments"},
		{"mysql://app:s3cret@db/payments", "mysql://app:xxxxx@db/payments"},
		{"postgres://app:s3@cr/et@db/payments", "postgres://app:xxxxx@db/payments"},
		{"postgres://app:s3 cr@et@db/payments", "postgres://app:xxxxx@db/payments"},
		{"redis://:s3 cret@cache:6379/0", "redis://:xxxxx@cache:6379/0"},
		{"postgres://app@db/payments?sslmode=disable&password=s3cret", "postgres://app@db/payments?sslmode=disable&password=xxxxx"},
		{"postgres://db/p?sslpassword=s3cret&sslmode=require", "postgres://db/p?sslpassword=xxxxx&sslmode=require"},
		{"host=db user=app password=s3cret dbname=payments", "host=db user=app password=xxxxx dbname=payments"},
		{"host=db password = 's3 cret' dbname=payments", "host=db password = xxxxx dbname=payments"},
		{"host=db PASSWORD=s3cret", "host=db PASSWORD=xxxxx"},
		{"sqlite:/var/lib/payments.db", "sqlite:/var/lib/payments.db"},
		{"postgres://app@db/payments", "postgres://app@db/payments"},
	} {
		if got := Redact(tc.in); got != tc.want {
			t.Errorf("Redact(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// TestOpenErrorsHideThePassword: a URL Open cannot use must not come back
// with its password in the error, whatever the reason it is refused.
func TestOpenErrorsHideThePassword(t *testing.T) {
	for _, raw := range []string{
		"mysql://app:s3cret@127.0.0.1/payments",
		"host=127.0.0.1 user=app password=s3cret dbname=payments",
		"s3cret",
		"postgres://app:s3cret@127.0.0.1:1/payments?connect_timeout=2",
		"postgres://app@127.0.0.1:1/payments?password=s3cret&connect_timeout=2",
		"postgres://app:s3cret@[::1/payments",
	} {
		db, err := Open(context.Background(), raw, 0)
		if err == nil {
			db.Close()
			t.Errorf("Open(%q) succeeded", raw)
			continue
		}
		if strings.Contains(err.Error(), "s3cret") {
			t.Errorf("Open(%q): the error shows the password: %v", raw, err)
		}
	}
}
