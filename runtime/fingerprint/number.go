package fingerprint

import "strconv"

// maxExponent bounds a number's written exponent. Exact decimals need no
// float range, but an exponent of a billion digits' worth would make the
// canonical spelling huge; no amount of money needs more than this.
const maxExponent = 1 << 40

// decimal is a JSON number as written: sign, the digits before and after the
// point, and the exponent. It never goes through float64, so two numbers are
// equal exactly when they denote the same decimal value.
type decimal struct {
	neg         bool
	intPart     []byte
	fracPart    []byte
	exp         int64
	expOverflow bool
}

// scanNumber reads a number in JSON grammar starting at b[i]. It returns
// the end of the number, or ok=false and the offset of the offending byte.
// A number followed by something that cannot follow it ("01", "1.") is left
// to the caller, who meets the unexpected byte.
func scanNumber(b []byte, i int) (d decimal, end int, ok bool) {
	if i < len(b) && b[i] == '-' {
		d.neg = true
		i++
	}
	start := i
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && b[i] >= '1' && b[i] <= '9':
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
	default:
		return d, i, false
	}
	d.intPart = b[start:i]
	if i < len(b) && b[i] == '.' {
		i++
		start = i
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
		if i == start {
			return d, i, false
		}
		d.fracPart = b[start:i]
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		neg := false
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			neg = b[i] == '-'
			i++
		}
		start = i
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			if d.exp < maxExponent {
				d.exp = d.exp*10 + int64(b[i]-'0')
			} else {
				d.expOverflow = true
			}
			i++
		}
		if i == start {
			return d, i, false
		}
		if neg {
			d.exp = -d.exp
		}
	}
	return d, i, true
}

// parseDecimal reads s as exactly one JSON number.
func parseDecimal(s []byte) (decimal, bool) {
	d, end, ok := scanNumber(s, 0)
	return d, ok && end == len(s) && !d.expOverflow
}

// appendCanonical writes the number's canonical spelling. With the value
// written as digits × 10^e (digits without leading or trailing zeros), the
// layout follows ECMAScript's Number.prototype.toString, as RFC 8785 does
// for doubles, but on the exact digits: 1000, 1.5, 0.001, 1e+21, 1.5e-7.
// Zero, negative zero included, is 0.
func (d decimal) appendCanonical(dst []byte) []byte {
	ip, fp := d.intPart, d.fracPart
	if len(fp) == 0 && d.exp == 0 && len(ip) <= 21 {
		// The common integer: already canonical unless it is -0.
		if len(ip) == 1 && ip[0] == '0' {
			return append(dst, '0')
		}
		if d.neg {
			dst = append(dst, '-')
		}
		return append(dst, ip...)
	}
	e := d.exp - int64(len(fp))
	for len(ip) > 0 && ip[0] == '0' {
		ip = ip[1:]
	}
	if len(ip) == 0 {
		for len(fp) > 0 && fp[0] == '0' {
			fp = fp[1:]
		}
	}
	for len(fp) > 0 && fp[len(fp)-1] == '0' {
		fp = fp[:len(fp)-1]
		e++
	}
	if len(fp) == 0 {
		for len(ip) > 0 && ip[len(ip)-1] == '0' {
			ip = ip[:len(ip)-1]
			e++
		}
	}
	n := int64(len(ip) + len(fp))
	if n == 0 {
		return append(dst, '0')
	}
	if d.neg {
		dst = append(dst, '-')
	}
	// digits writes digits [from, to) of ip followed by fp.
	digits := func(dst []byte, from, to int64) []byte {
		li := int64(len(ip))
		if from < li {
			dst = append(dst, ip[from:min(to, li)]...)
		}
		if to > li {
			dst = append(dst, fp[max(from, li)-li:to-li]...)
		}
		return dst
	}
	p := n + e // the value is 0.digits × 10^p
	switch {
	case e >= 0 && p <= 21:
		dst = digits(dst, 0, n)
		for range e {
			dst = append(dst, '0')
		}
	case p > 0 && p <= 21:
		dst = digits(dst, 0, p)
		dst = append(dst, '.')
		dst = digits(dst, p, n)
	case p <= 0 && p > -6:
		dst = append(dst, '0', '.')
		for range -p {
			dst = append(dst, '0')
		}
		dst = digits(dst, 0, n)
	default:
		dst = digits(dst, 0, 1)
		if n > 1 {
			dst = append(dst, '.')
			dst = digits(dst, 1, n)
		}
		dst = append(dst, 'e')
		if p-1 >= 0 {
			dst = append(dst, '+')
		}
		dst = strconv.AppendInt(dst, p-1, 10)
	}
	return dst
}
