package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
)

// errValidation marks a request the service refuses with a 400
// validation-error; its text is the problem's detail.
type errValidation struct{ msg string }

func (e *errValidation) Error() string { return e.msg }

func invalid(format string, args ...any) error {
	return &errValidation{msg: fmt.Sprintf(format, args...)}
}

// object is a request body read as one JSON object. Field names match
// exactly: encoding/json would also accept "Amount" for "amount", which the
// fingerprint, reading JSON Pointers, would not.
type object struct {
	fields map[string]json.RawMessage
}

// readObject reads the body of r as a JSON object that has only the allowed
// fields.
func readObject(w http.ResponseWriter, r *http.Request, limit int64, allowed ...string) (object, error) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return object{}, err
		}
		return object{}, invalid("the request body could not be read")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var fields map[string]json.RawMessage
	if err := dec.Decode(&fields); err != nil || fields == nil {
		return object{}, invalid("the request body must be a JSON object")
	}
	if _, err := dec.Token(); err != io.EOF {
		return object{}, invalid("the request body must hold one JSON object and nothing after it")
	}
	for name := range fields {
		ok := false
		for _, a := range allowed {
			ok = ok || a == name
		}
		if !ok {
			return object{}, invalid("unknown field %q; the fields are %s", name, strings.Join(allowed, ", "))
		}
	}
	return object{fields: fields}, nil
}

func (o object) raw(name string) (json.RawMessage, bool) {
	v, ok := o.fields[name]
	if !ok || string(v) == "null" {
		return nil, false
	}
	return v, true
}

// str reads a string field; required fields must be present and not empty.
func (o object) str(name string, required bool, maxLen int) (string, error) {
	v, ok := o.raw(name)
	if !ok {
		if required {
			return "", invalid("%s is required", name)
		}
		return "", nil
	}
	var s string
	if v[0] != '"' || json.Unmarshal(v, &s) != nil {
		return "", invalid("%s must be a string", name)
	}
	if required && s == "" {
		return "", invalid("%s must not be empty", name)
	}
	if len(s) > maxLen {
		return "", invalid("%s is longer than %d bytes", name, maxLen)
	}
	return s, nil
}

// currency reads a required three-capital-letter currency code.
func (o object) currency(name string) (string, error) {
	s, err := o.str(name, true, 3)
	if err != nil {
		return "", err
	}
	if len(s) != 3 || strings.Trim(s, "ABCDEFGHIJKLMNOPQRSTUVWXYZ") != "" {
		return "", invalid("%s must be three capital letters, such as EUR", name)
	}
	return s, nil
}

// money reads a required integral amount in [minimum, maxMoney].
func (o object) money(name string, minimum, maxMoney int64) (int64, error) {
	v, ok := o.raw(name)
	if !ok {
		return 0, invalid("%s is required", name)
	}
	n, err := parseIntegral(string(v))
	if err != nil {
		return 0, invalid("%s %s", name, err)
	}
	if n < minimum || n > maxMoney {
		return 0, invalid("%s must be an integer from %d to %d (minor units)", name, minimum, maxMoney)
	}
	return n, nil
}

// errOutOfRange reports an integral number too large to be money.
var errOutOfRange = errors.New("is out of range")

// parseIntegral reads a JSON number literal that denotes an integer, in any
// spelling: 1000, 1e3, 1000.0 and 10000e-1 are all 1000. It works on the
// decimal digits rather than through big.Rat or float64, so that neither a
// huge exponent nor rounding can fool it.
func parseIntegral(lit string) (int64, error) {
	s := lit
	if s == "" || !(s[0] == '-' || (s[0] >= '0' && s[0] <= '9')) {
		return 0, errors.New("must be a number")
	}
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	mant, expPart, hasExp := strings.Cut(strings.ToLower(s), "e")
	exp := 0
	if hasExp {
		e, err := strconv.Atoi(expPart)
		if err != nil {
			if strings.Trim(expPart, "+-0123456789") == "" {
				return 0, errOutOfRange
			}
			return 0, errors.New("must be a number")
		}
		exp = e
	}
	intPart, frac, _ := strings.Cut(mant, ".")
	digits := strings.TrimLeft(intPart+frac, "0")
	exp -= len(frac)
	// Trailing zeros move into the exponent: 1000.0 is 1 × 10^3.
	trimmed := strings.TrimRight(digits, "0")
	exp += len(digits) - len(trimmed)
	digits = trimmed
	if digits == "" {
		return 0, nil
	}
	if exp < 0 {
		return 0, errors.New("must be a whole number of minor units")
	}
	if len(digits)+exp > 18 {
		return 0, errOutOfRange
	}
	n, err := strconv.ParseInt(digits+strings.Repeat("0", exp), 10, 64)
	if err != nil {
		return 0, errors.New("must be a number")
	}
	if neg {
		n = -n
	}
	return n, nil
}
