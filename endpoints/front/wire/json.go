package wire

import (
	"bytes"
	"errors"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// A request body and every event of a stream pass through the front door,
// which needs only a few keys of each: the model and stream of a request,
// the content and finish of a chunk. Decoding them whole into maps cost
// most of the front door's time per request and per event; these walk the
// raw bytes instead, allocating nothing, and hand back the raw values of
// the keys asked for. They check the structure they walk (strings closed,
// brackets balanced) but not every detail of JSON's grammar: a value they
// skip is the head's to judge, and the head answers a malformed body 400
// itself.

var errJSON = errors.New("malformed JSON")

// skipWS returns the index of the first byte at or after i that is not
// JSON white space.
func skipWS(b []byte, i int) int {
	for i < len(b) {
		switch b[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

// skipString returns the index after the string starting at b[i] ('"'):
// the next quote not escaped (preceded by an even number of backslashes).
func skipString(b []byte, i int) (int, error) {
	for j := i + 1; ; j++ {
		k := bytes.IndexByte(b[j:], '"')
		if k < 0 {
			return 0, errJSON
		}
		j += k
		n := 0
		for m := j - 1; m > i && b[m] == '\\'; m-- {
			n++
		}
		if n%2 == 0 {
			return j + 1, nil
		}
	}
}

// skipValue returns the index after the value starting at b[i].
func skipValue(b []byte, i int) (int, error) {
	if i >= len(b) {
		return 0, errJSON
	}
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		depth := 0
		for j := i; j < len(b); j++ {
			switch b[j] {
			case '"':
				end, err := skipString(b, j)
				if err != nil {
					return 0, err
				}
				j = end - 1
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return j + 1, nil
				}
			}
		}
		return 0, errJSON
	}
	j := i
	for j < len(b) {
		switch b[j] {
		case ',', '}', ']', ' ', '\t', '\n', '\r':
			if j == i {
				return 0, errJSON
			}
			return j, nil
		}
		j++
	}
	if j == i {
		return 0, errJSON
	}
	return j, nil
}

// EachKey calls fn with each key (raw, between its quotes, escapes left
// as written) and value (raw, with its offsets in obj) of the JSON object
// obj, in order, until fn returns false. It fails when obj is not an
// object.
func EachKey(obj []byte, fn func(key, val []byte, at int) bool) error {
	i := skipWS(obj, 0)
	if i >= len(obj) || obj[i] != '{' {
		return errNotObject
	}
	i = skipWS(obj, i+1)
	if i < len(obj) && obj[i] == '}' {
		return trailing(obj, i+1)
	}
	for {
		if i >= len(obj) || obj[i] != '"' {
			return errJSON
		}
		kend, err := skipString(obj, i)
		if err != nil {
			return err
		}
		key := obj[i+1 : kend-1]
		i = skipWS(obj, kend)
		if i >= len(obj) || obj[i] != ':' {
			return errJSON
		}
		vstart := skipWS(obj, i+1)
		vend, err := skipValue(obj, vstart)
		if err != nil {
			return err
		}
		if !fn(key, obj[vstart:vend], vstart) {
			return nil
		}
		i = skipWS(obj, vend)
		switch {
		case i < len(obj) && obj[i] == ',':
			i = skipWS(obj, i+1)
		case i < len(obj) && obj[i] == '}':
			return trailing(obj, i+1)
		default:
			return errJSON
		}
	}
}

// errNotObject is a body or event that is not a JSON object.
var errNotObject = errors.New("not a JSON object")

// trailing fails when anything but white space follows a value.
func trailing(b []byte, i int) error {
	if skipWS(b, i) != len(b) {
		return errJSON
	}
	return nil
}

// EachElem calls fn with each element of the JSON array arr until fn
// returns false; anything but an array calls it for nothing.
func EachElem(arr []byte, fn func(val []byte) bool) {
	i := skipWS(arr, 0)
	if i >= len(arr) || arr[i] != '[' {
		return
	}
	i = skipWS(arr, i+1)
	for i < len(arr) && arr[i] != ']' {
		end, err := skipValue(arr, i)
		if err != nil || !fn(arr[i:end]) {
			return
		}
		i = skipWS(arr, end)
		if i < len(arr) && arr[i] == ',' {
			i = skipWS(arr, i+1)
		}
	}
}

// KeyIs reports whether a raw key (escapes as written) is name. A key
// written with escapes ("mod\u0065l") is the name it decodes to, as for
// the head's JSON parser.
func KeyIs(raw []byte, name string) bool {
	if bytes.IndexByte(raw, '\\') < 0 {
		return string(raw) == name
	}
	s, ok := unquote(raw)
	return ok && s == name
}

// IsNull reports whether a raw value is absent or null.
func IsNull(raw []byte) bool { return len(raw) == 0 || string(raw) == "null" }

// StringValue decodes a raw JSON string value; ok is false for anything
// else.
func StringValue(raw []byte) (string, bool) {
	if len(raw) < 2 || raw[0] != '"' || raw[len(raw)-1] != '"' {
		return "", false
	}
	return unquote(raw[1 : len(raw)-1])
}

// NumberValue decodes a raw JSON number; ok is false for anything else.
func NumberValue(raw []byte) (float64, bool) {
	if len(raw) == 0 || !(raw[0] == '-' || raw[0] >= '0' && raw[0] <= '9') {
		return 0, false
	}
	f, err := strconv.ParseFloat(string(raw), 64)
	return f, err == nil
}

// unquote decodes the inside of a JSON string (between its quotes).
func unquote(s []byte) (string, bool) {
	if bytes.IndexByte(s, '\\') < 0 {
		return string(s), true
	}
	out, ok := appendUnquoted(make([]byte, 0, len(s)), s)
	return string(out), ok
}

// appendUnquoted appends the decoded inside of a JSON string to dst.
func appendUnquoted(dst, s []byte) ([]byte, bool) {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '\\' {
			dst = append(dst, c)
			continue
		}
		if i++; i >= len(s) {
			return dst, false
		}
		switch s[i] {
		case '"', '\\', '/':
			dst = append(dst, s[i])
		case 'b':
			dst = append(dst, '\b')
		case 'f':
			dst = append(dst, '\f')
		case 'n':
			dst = append(dst, '\n')
		case 'r':
			dst = append(dst, '\r')
		case 't':
			dst = append(dst, '\t')
		case 'u':
			r, n := hex4(s[i+1:])
			if n == 0 {
				return dst, false
			}
			i += n
			if utf16.IsSurrogate(r) {
				if r2, n2 := hex4After(s[i+1:]); n2 > 0 {
					if dec := utf16.DecodeRune(r, r2); dec != utf8.RuneError {
						r, i = dec, i+n2
					} else {
						r = utf8.RuneError
					}
				} else {
					r = utf8.RuneError
				}
			}
			dst = utf8.AppendRune(dst, r)
		default:
			return dst, false
		}
	}
	return dst, true
}

// hex4 reads 4 hex digits; n is 4, or 0 when they are not there.
func hex4(s []byte) (rune, int) {
	if len(s) < 4 {
		return 0, 0
	}
	var r rune
	for _, c := range s[:4] {
		switch {
		case c >= '0' && c <= '9':
			r = r<<4 | rune(c-'0')
		case c >= 'a' && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case c >= 'A' && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return 0, 0
		}
	}
	return r, 4
}

// hex4After reads "\uXXXX" (a surrogate pair's second half); n is 6, or 0.
func hex4After(s []byte) (rune, int) {
	if len(s) < 6 || s[0] != '\\' || s[1] != 'u' {
		return 0, 0
	}
	r, n := hex4(s[2:])
	if n == 0 {
		return 0, 0
	}
	return r, 6
}

// AppendText appends the text of a raw JSON string value to dst; it
// reports whether there was any.
func AppendText(dst *[]byte, raw []byte) bool {
	if len(raw) < 3 || raw[0] != '"' {
		return false // absent, null, or ""
	}
	*dst, _ = appendUnquoted(*dst, raw[1:len(raw)-1])
	return true
}
