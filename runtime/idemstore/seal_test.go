package idemstore_test

import (
	"bytes"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/idemgen/idemgen/runtime/idemstore"
)

// roundTripSealers are the sealers a stored value round-trips under: none,
// and one that also accepts values stored before sealing.
func roundTripSealers(t testing.TB) map[string]idemstore.Sealer {
	s, err := idemstore.NewAESGCM(idemstore.SealKey{ID: "k1", Key: make([]byte, 32)}, idemstore.SealKey{})
	if err != nil {
		t.Fatal(err)
	}
	return map[string]idemstore.Sealer{"no sealer": nil, "sealer": s}
}

// lookalikes begin as sealed values do, with every kind of key ID length.
var lookalikes = []string{
	"",
	"ch_1",
	"\x00idem-sealed\x01",
	"\x00idem-sealed\x01\x00",
	"\x00idem-sealed\x01\x00\x00idem-sealed\x01\x05k-id-x",
	"\x00idem-sealed\x01\x00\xffidem-unsealed\xffescaped already",
	"\x00idem-sealed\x01\x05k-id-whatever",
	"\x00idem-sealed\x01\xffshort",
	"\x00idem-sealed-phase\x01",
	"\x00idem-sealed-phase\x01\x00",
	"\x00idem-sealed-phase\x01\x05k-id-ch_1",
	"\x00idem-sealed-phase\x01\xff",
}

// A response stored and read back is the response, sealed or not, whatever
// its body's bytes: a body that begins as a sealed one does is not taken
// for one.
func FuzzResponseRoundTrip(f *testing.F) {
	for _, b := range lookalikes {
		f.Add([]byte(b))
	}
	sealers := roundTripSealers(f)
	id := idemstore.Identity{Tenant: "acme", Scope: "echo", Key: "k-1"}
	f.Fuzz(func(t *testing.T, body []byte) {
		for name, s := range sealers {
			resp := idemstore.Response{Status: http.StatusCreated, Header: http.Header{"Etag": {`"v1"`}}, Body: body}
			stored, err := idemstore.SealResponse(s, id, resp)
			if err != nil {
				t.Fatalf("%s: SealResponse: %v", name, err)
			}
			if s == nil && !bytes.HasPrefix(body, []byte("\x00idem-sealed\x01")) && !bytes.Equal(stored.Body, body) {
				t.Fatalf("%s: the body %q is stored as %q; a body that cannot be taken for a seal is stored as it is", name, body, stored.Body)
			}
			if idemstore.IsSealed(stored) != (s != nil) {
				t.Fatalf("%s: IsSealed(%q) = %v", name, stored.Body, !(s != nil))
			}
			got, err := idemstore.OpenResponse(s, id, stored)
			if err != nil {
				t.Fatalf("%s: the body %q, stored as %q, does not open: %v", name, body, stored.Body, err)
			}
			if !bytes.Equal(got.Body, body) || got.Header.Get("Etag") != `"v1"` || got.Status != http.StatusCreated {
				t.Fatalf("%s: the body %q reads back as %d %v %q", name, body, got.Status, got.Header, got.Body)
			}
		}
	})
}

// A phase's result recorded and read back is the result, sealed or not,
// whatever its bytes.
func FuzzPhaseRoundTrip(f *testing.F) {
	for _, b := range lookalikes {
		f.Add([]byte(b))
	}
	sealers := roundTripSealers(f)
	id := idemstore.Identity{Tenant: "acme", Scope: "charge", Key: "k-1"}
	f.Fuzz(func(t *testing.T, result []byte) {
		for name, s := range sealers {
			stored, err := idemstore.SealPhase(s, id, "charge", result)
			if err != nil {
				t.Fatalf("%s: SealPhase: %v", name, err)
			}
			if s == nil && !bytes.HasPrefix(result, []byte("\x00idem-sealed-phase\x01")) && !bytes.Equal(stored, result) {
				t.Fatalf("%s: the result %q is stored as %q; a result that cannot be taken for a seal is stored as it is", name, result, stored)
			}
			got, err := idemstore.OpenPhase(s, id, "charge", stored)
			if err != nil {
				t.Fatalf("%s: the result %q, stored as %q, does not open: %v", name, result, stored, err)
			}
			if !bytes.Equal(got, result) {
				t.Fatalf("%s: the result %q reads back as %q", name, result, got)
			}
		}
	})
}

// Values earlier releases stored read back as they did: an unsealed one
// that does not begin as a seal as it is, a sealed one opened; and one
// that claims a seal it does not hold is refused, for a phase in words
// about a phase.
func TestValuesStoredByEarlierReleasesStillRead(t *testing.T) {
	s := roundTripSealers(t)["sealer"]
	id := idemstore.Identity{Tenant: "acme", Scope: "charge", Key: "k-1"}
	plain := idemstore.Response{Status: http.StatusCreated, Header: http.Header{}, Body: []byte(`{"id":"ch_1"}`)}
	for name, s := range roundTripSealers(t) {
		if got, err := idemstore.OpenResponse(s, id, plain); err != nil || !bytes.Equal(got.Body, plain.Body) {
			t.Errorf("%s: an unsealed response reads back as %q, %v", name, got.Body, err)
		}
		if got, err := idemstore.OpenPhase(s, id, "charge", []byte("ch_1")); err != nil || string(got) != "ch_1" {
			t.Errorf("%s: an unsealed phase result reads back as %q, %v", name, got, err)
		}
	}
	// The sealed forms are those of earlier releases: the magic, the key
	// ID's length and the key ID, then the ciphertext.
	sealed, err := idemstore.SealPhase(s, id, "charge", []byte("ch_1"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(sealed, []byte("\x00idem-sealed-phase\x01\x02k1")) {
		t.Fatalf("a sealed result is stored as %q", sealed)
	}
	_, err = idemstore.OpenPhase(nil, id, "charge", sealed)
	if !errors.Is(err, idemstore.ErrUnreadable) || strings.Contains(err.Error(), "response") || !strings.Contains(err.Error(), `phase "charge"`) {
		t.Fatalf("a sealed phase result without a sealer: %v; want ErrUnreadable naming the phase and no response", err)
	}
	resp, err := idemstore.SealResponse(s, id, plain)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(resp.Body, []byte("\x00idem-sealed\x01\x02k1")) {
		t.Fatalf("a sealed response is stored as %q", resp.Body)
	}
}

// An earlier release stored an unsealed body or phase result as given,
// whatever it began with, and read one that began as a seal does as
// unreadable: one that went on with a key ID length of 0 (an endpoint that
// echoes a client's bytes) still reads that way, never as an escaped value
// with its first bytes taken off, a body the first run never answered
// (docs/semantics.md §6.1) or a result the downstream never returned.
func TestEarlierReleaseValueBeginningAsAnEscapeReadsAsItDid(t *testing.T) {
	id := idemstore.Identity{Tenant: "acme", Scope: "charge", Key: "k-1"}
	echoed := []byte("\x00idem-sealed\x01\x00{\"status\":\"refunded\"}")
	phase := []byte("\x00idem-sealed-phase\x01\x00ch_forged")
	for name, s := range roundTripSealers(t) {
		stored := idemstore.Response{Status: http.StatusCreated, Header: http.Header{}, Body: echoed}
		got, err := idemstore.OpenResponse(s, id, stored)
		if err == nil && !bytes.Equal(got.Body, echoed) {
			t.Errorf("%s: a body an earlier release stored as %q reads back as %q; want it as stored, or ErrUnreadable as the earlier release read it", name, echoed, got.Body)
		} else if err != nil && !errors.Is(err, idemstore.ErrUnreadable) {
			t.Errorf("%s: %v", name, err)
		}
		res, err := idemstore.OpenPhase(s, id, "charge", phase)
		if err == nil && !bytes.Equal(res, phase) {
			t.Errorf("%s: a phase result an earlier release stored as %q reads back as %q; want it as stored, or ErrUnreadable as the earlier release read it", name, phase, res)
		} else if err != nil && !errors.Is(err, idemstore.ErrUnreadable) {
			t.Errorf("%s: %v", name, err)
		}
	}
}
