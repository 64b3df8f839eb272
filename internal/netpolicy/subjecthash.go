package netpolicy

import (
	"bytes"
	"crypto/sha1"
	"encoding/asn1"
	"encoding/binary"
	"errors"
	"fmt"
	"sort"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// SubjectHash is OpenSSL's hash of a certificate's subject (rawSubject,
// the DER of its Name), the name a certificate has in a directory
// OpenSSL's clients read (SSL_CERT_DIR, -CApath): "%08x.0". It is the
// first four bytes, little-endian, of the SHA-1 of the name in OpenSSL's
// canonical form: every string value as UTF-8, without leading or
// trailing white space, inner runs of white space as one space, ASCII
// letters in lower case; the relative names' SETs one after another,
// without the outer SEQUENCE.
func SubjectHash(rawSubject []byte) (uint32, error) {
	var rdns []asn1.RawValue
	rest, err := asn1.Unmarshal(rawSubject, &rdns)
	if err != nil {
		return 0, fmt.Errorf("certificate subject: %w", err)
	}
	if len(rest) > 0 {
		return 0, errors.New("certificate subject: trailing data")
	}
	var canon []byte
	for _, rdn := range rdns {
		if rdn.Class != asn1.ClassUniversal || rdn.Tag != asn1.TagSet {
			return 0, errors.New("certificate subject: a relative name that is not a SET")
		}
		var elems [][]byte
		for b := rdn.Bytes; len(b) > 0; {
			var atv struct {
				Type  asn1.ObjectIdentifier
				Value asn1.RawValue
			}
			if b, err = asn1.Unmarshal(b, &atv); err != nil {
				return 0, fmt.Errorf("certificate subject: %w", err)
			}
			if s, ok := canonString(atv.Value); ok {
				atv.Value = asn1.RawValue{Class: asn1.ClassUniversal, Tag: asn1.TagUTF8String, Bytes: []byte(s)}
			} else {
				atv.Value = asn1.RawValue{FullBytes: atv.Value.FullBytes}
			}
			e, err := asn1.Marshal(atv)
			if err != nil {
				return 0, fmt.Errorf("certificate subject: %w", err)
			}
			elems = append(elems, e)
		}
		// DER orders a SET OF by its elements' encodings.
		sort.Slice(elems, func(i, j int) bool { return bytes.Compare(elems[i], elems[j]) < 0 })
		set, err := asn1.Marshal(asn1.RawValue{Class: asn1.ClassUniversal, Tag: asn1.TagSet, IsCompound: true, Bytes: bytes.Join(elems, nil)})
		if err != nil {
			return 0, fmt.Errorf("certificate subject: %w", err)
		}
		canon = append(canon, set...)
	}
	sum := sha1.Sum(canon)
	return binary.LittleEndian.Uint32(sum[:4]), nil
}

// canonString is v in OpenSSL's canonical form, for the string types it
// canonicalizes (others are kept as they are: ok false).
func canonString(v asn1.RawValue) (string, bool) {
	if v.Class != asn1.ClassUniversal {
		return "", false
	}
	var s string
	switch v.Tag {
	case asn1.TagUTF8String, asn1.TagPrintableString, asn1.TagIA5String, 26: // 26: VisibleString
		s = string(v.Bytes)
	case asn1.TagT61String: // as OpenSSL reads it: one byte, one character
		r := make([]rune, len(v.Bytes))
		for i, c := range v.Bytes {
			r[i] = rune(c)
		}
		s = string(r)
	case asn1.TagBMPString:
		if len(v.Bytes)%2 != 0 {
			return "", false
		}
		u := make([]uint16, len(v.Bytes)/2)
		for i := range u {
			u[i] = binary.BigEndian.Uint16(v.Bytes[2*i:])
		}
		s = string(utf16.Decode(u))
	case 28: // UniversalString
		if len(v.Bytes)%4 != 0 {
			return "", false
		}
		r := make([]rune, len(v.Bytes)/4)
		for i := range r {
			r[i] = rune(binary.BigEndian.Uint32(v.Bytes[4*i:]))
		}
		s = string(r)
	default:
		return "", false
	}
	if !utf8.ValidString(s) {
		return "", false
	}
	isSpace := func(c byte) bool { return c == ' ' || c >= '\t' && c <= '\r' }
	var b strings.Builder
	space := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		if isSpace(c) {
			space = b.Len() > 0
			continue
		}
		if space {
			b.WriteByte(' ')
			space = false
		}
		if c >= 'A' && c <= 'Z' {
			c += 'a' - 'A'
		}
		b.WriteByte(c)
	}
	return b.String(), true
}
