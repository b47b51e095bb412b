package tcpproxy

import (
	"bufio"
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

// echoServer answers every line it reads with the same line, until the
// test ends.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	return ln.Addr().String()
}

func dial(t *testing.T, p *Proxy) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c, bufio.NewReader(c)
}

func roundTrip(c net.Conn, r *bufio.Reader, line string) (string, error) {
	if _, err := io.WriteString(c, line+"\n"); err != nil {
		return "", err
	}
	got, err := r.ReadString('\n')
	return strings.TrimSuffix(got, "\n"), err
}

// A round trip through a delaying proxy takes at least twice the delay,
// and every byte arrives, in order, in both directions.
func TestDelayHoldsEachWay(t *testing.T) {
	p := New(t, echoServer(t))
	const d = 20 * time.Millisecond
	p.SetDelay(d)
	c, r := dial(t, p)
	for i, line := range []string{"one", strings.Repeat("x", 100<<10), "three"} {
		start := time.Now()
		got, err := roundTrip(c, r, line)
		if err != nil || got != line {
			t.Fatalf("round trip %d: got %d bytes, %v; want %d bytes back", i, len(got), err, len(line))
		}
		if took := time.Since(start); took < 2*d {
			t.Fatalf("round trip %d took %v, less than twice the delay %v", i, took, d)
		}
	}
}

// A refusing proxy resets new connections; ResetAll ends the open ones;
// after a stall the held bytes arrive.
func TestRefuseResetStall(t *testing.T) {
	p := New(t, echoServer(t))
	c, r := dial(t, p)
	p.SetStall(true)
	if _, err := io.WriteString(c, "held\n"); err != nil {
		t.Fatal(err)
	}
	p.SetStall(false)
	if got, err := r.ReadString('\n'); err != nil || got != "held\n" {
		t.Fatalf("after the stall: got %q, %v", got, err)
	}
	p.ResetAll()
	if _, err := roundTrip(c, r, "after reset"); err == nil {
		t.Fatal("a connection reset by the proxy still answers")
	}
	p.SetRefuse(true)
	// The reset may come before the dial returns or after: either way the
	// connection never answers.
	if c2, err := net.Dial("tcp", p.Addr()); err == nil {
		defer c2.Close()
		if _, err := roundTrip(c2, bufio.NewReader(c2), "refused"); err == nil {
			t.Fatal("a connection accepted while refusing answers")
		}
	}
	p.SetRefuse(false)
	c3, r3 := dial(t, p)
	if got, err := roundTrip(c3, r3, "again"); err != nil || got != "again" {
		t.Fatalf("after refusing ended: got %q, %v", got, err)
	}
}
