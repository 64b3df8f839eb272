package receipt

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"unicode/utf8"
)

// encoder writes compact JSON the way serde_json does, in the order its
// caller writes the fields.
type encoder struct {
	b   bytes.Buffer
	err error
}

const hexDigits = "0123456789abcdef"

// str writes s quoted: '"' and '\\' escaped, the control characters as
// \b \t \n \f \r or \u00xx (lowercase hex), everything else as it is.
// A string that is not UTF-8 cannot be written (serde's strings are
// UTF-8): the encoder's error.
func (e *encoder) str(s string) {
	if !utf8.ValidString(s) {
		if e.err == nil {
			e.err = fmt.Errorf("%q is not valid UTF-8", s)
		}
		return
	}
	e.b.WriteByte('"')
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		var esc string
		switch {
		case c == '"':
			esc = `\"`
		case c == '\\':
			esc = `\\`
		case c == '\b':
			esc = `\b`
		case c == '\t':
			esc = `\t`
		case c == '\n':
			esc = `\n`
		case c == '\f':
			esc = `\f`
		case c == '\r':
			esc = `\r`
		case c < 0x20:
			esc = `\u00` + string(hexDigits[c>>4]) + string(hexDigits[c&0xf])
		default:
			continue
		}
		e.b.WriteString(s[start:i])
		e.b.WriteString(esc)
		start = i + 1
	}
	e.b.WriteString(s[start:])
	e.b.WriteByte('"')
}

func (e *encoder) optStr(s *string) {
	if s == nil {
		e.b.WriteString("null")
		return
	}
	e.str(*s)
}

func (e *encoder) strs(ss []string) {
	e.b.WriteByte('[')
	for i, s := range ss {
		if i > 0 {
			e.b.WriteByte(',')
		}
		e.str(s)
	}
	e.b.WriteByte(']')
}

func (e *encoder) boolean(v bool) { e.b.WriteString(strconv.FormatBool(v)) }

// key writes the separator before a field (first: none) and its name.
func (e *encoder) key(first bool, name string) {
	if !first {
		e.b.WriteByte(',')
	}
	e.str(name)
	e.b.WriteByte(':')
}

func (e *encoder) invocation(inv *Invocation) {
	e.b.WriteByte('{')
	switch {
	case inv.Mode == ModeRun && inv.Run != nil && inv.Exec == nil:
		r := inv.Run
		e.key(true, "mode")
		e.str(ModeRun)
		e.key(false, "input")
		e.b.WriteByte('{')
		e.key(true, "command")
		e.strs(r.Command)
		e.key(false, "image")
		e.optStr(r.Image)
		e.key(false, "backend")
		e.optStr(r.Backend)
		e.key(false, "profile")
		e.str(r.Profile)
		e.key(false, "no_network")
		e.boolean(r.NoNetwork)
		e.key(false, "fast")
		e.boolean(r.Fast)
		e.key(false, "keep")
		e.boolean(r.Keep)
		e.b.WriteByte('}')
	case inv.Mode == ModeExec && inv.Exec != nil && inv.Run == nil:
		x := inv.Exec
		e.key(true, "mode")
		e.str(ModeExec)
		e.key(false, "input")
		e.b.WriteByte('{')
		e.key(true, "name")
		e.str(x.Name)
		e.key(false, "command")
		e.strs(x.Command)
		e.key(false, "env")
		e.strs(x.Env)
		e.key(false, "workdir")
		e.optStr(x.Workdir)
		e.key(false, "sudo")
		e.boolean(x.Sudo)
		e.b.WriteByte('}')
	default:
		if e.err == nil {
			e.err = fmt.Errorf("invocation of mode %q without its input", inv.Mode)
		}
	}
	e.b.WriteByte('}')
}

func (e *encoder) outcome(o *Outcome) {
	e.b.WriteByte('{')
	e.key(true, "exit_code")
	e.b.WriteString(strconv.FormatInt(int64(o.ExitCode), 10))
	e.key(false, "success")
	e.boolean(o.Success)
	e.key(false, "output_sha256")
	e.str(o.OutputSHA256)
	e.key(false, "output_bytes")
	e.b.WriteString(strconv.FormatUint(o.OutputBytes, 10))
	e.key(false, "error")
	e.optStr(o.Error)
	e.b.WriteByte('}')
}

// head writes the payload's fields, without the closing brace.
func (e *encoder) head(r *Receipt) {
	e.b.WriteByte('{')
	e.key(true, "version")
	e.b.WriteString(strconv.FormatUint(uint64(r.Version), 10))
	e.key(false, "receipt_id")
	e.str(r.ReceiptID)
	e.key(false, "recorded_at")
	e.str(r.RecordedAt)
	e.key(false, "invocation")
	e.invocation(&r.Invocation)
	e.key(false, "outcome")
	e.outcome(&r.Outcome)
}

// Payload is the bytes r's hash and signature are over.
func (r *Receipt) Payload() ([]byte, error) {
	var e encoder
	e.head(r)
	e.b.WriteByte('}')
	if e.err != nil {
		return nil, e.err
	}
	return e.b.Bytes(), nil
}

// Marshal is r's file: the whole receipt as serde_json's pretty printer
// writes it (two-space indent), and a final newline-free end as
// upstream's.
func Marshal(r *Receipt) ([]byte, error) {
	var e encoder
	e.head(r)
	e.key(false, "payload_hash_sha256")
	e.str(r.PayloadHashSHA256)
	e.key(false, "signature")
	if s := r.Signature; s == nil {
		e.b.WriteString("null")
	} else {
		e.b.WriteByte('{')
		e.key(true, "algorithm")
		e.str(s.Algorithm)
		e.key(false, "key_id")
		e.str(s.KeyID)
		e.key(false, "public_key")
		e.str(s.PublicKey)
		e.key(false, "signature")
		e.str(s.Signature)
		e.b.WriteByte('}')
	}
	e.b.WriteByte('}')
	if e.err != nil {
		return nil, e.err
	}
	var out bytes.Buffer
	// Indent changes only the white space between tokens: the strings
	// keep their escapes.
	if err := json.Indent(&out, e.b.Bytes(), "", "  "); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

// ErrBadInput marks a receipt file that is not a receipt: not UTF-8, not
// JSON, a field missing or of the wrong type.
var ErrBadInput = errors.New("invalid receipt")

func badf(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrBadInput}, args...)...)
}

// object reads the JSON object raw as its fields, by exact name (as
// serde matches them, not encoding/json's case-insensitive match); a
// field given twice is an error, as in serde.
func object(raw json.RawMessage, what string) (map[string]json.RawMessage, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	tok, err := dec.Token()
	if err != nil {
		return nil, badf("%s: %v", what, err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, badf("%s: expected an object", what)
	}
	fields := map[string]json.RawMessage{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, badf("%s: %v", what, err)
		}
		name, _ := tok.(string)
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, badf("%s.%s: %v", what, name, err)
		}
		if _, dup := fields[name]; dup {
			return nil, badf("%s: duplicate field %q", what, name)
		}
		fields[name] = v
	}
	if _, err := dec.Token(); err != nil {
		return nil, badf("%s: %v", what, err)
	}
	return fields, nil
}

// fieldReader reads the fields of one object into typed values; the
// first failure sticks.
type fieldReader struct {
	what   string
	fields map[string]json.RawMessage
	err    error
}

func (f *fieldReader) fail(name, format string, args ...any) {
	if f.err == nil {
		f.err = badf("%s.%s: "+format, append([]any{f.what, name}, args...)...)
	}
}

// get decodes the required field name into v.
func (f *fieldReader) get(name string, v any) {
	raw, ok := f.fields[name]
	if !ok {
		f.fail(name, "missing")
		return
	}
	if bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
		f.fail(name, "null where a value is required")
		return
	}
	if err := json.Unmarshal(raw, v); err != nil {
		f.fail(name, "%v", err)
	}
}

// opt decodes the optional string field name: absent or null is nil.
func (f *fieldReader) opt(name string) *string {
	raw, ok := f.fields[name]
	if !ok || bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
		return nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		f.fail(name, "%v", err)
		return nil
	}
	return &s
}

func (f *fieldReader) strs(name string) []string {
	var ss []string
	f.get(name, &ss)
	if ss == nil {
		ss = []string{}
	}
	return ss
}

func reader(raw json.RawMessage, what string) (*fieldReader, error) {
	fields, err := object(raw, what)
	if err != nil {
		return nil, err
	}
	return &fieldReader{what: what, fields: fields}, nil
}

// Parse reads a receipt file. Unknown fields are ignored; a missing
// required field, a wrong type, a field given twice, bytes that are not
// UTF-8 or not one JSON value are ErrBadInput.
func Parse(data []byte) (*Receipt, error) {
	if !utf8.Valid(data) {
		return nil, badf("not UTF-8")
	}
	if !json.Valid(data) {
		var v any
		err := json.Unmarshal(data, &v)
		return nil, badf("not JSON: %v", err)
	}
	top, err := reader(data, "receipt")
	if err != nil {
		return nil, err
	}
	r := &Receipt{}
	top.get("version", &r.Version)
	top.get("receipt_id", &r.ReceiptID)
	top.get("recorded_at", &r.RecordedAt)
	top.get("payload_hash_sha256", &r.PayloadHashSHA256)
	if top.err != nil {
		return nil, top.err
	}
	var invRaw, outRaw json.RawMessage
	top.get("invocation", &invRaw)
	top.get("outcome", &outRaw)
	if top.err != nil {
		return nil, top.err
	}
	if err := parseInvocation(invRaw, &r.Invocation); err != nil {
		return nil, err
	}
	out, err := reader(outRaw, "outcome")
	if err != nil {
		return nil, err
	}
	out.get("exit_code", &r.Outcome.ExitCode)
	out.get("success", &r.Outcome.Success)
	out.get("output_sha256", &r.Outcome.OutputSHA256)
	out.get("output_bytes", &r.Outcome.OutputBytes)
	r.Outcome.Error = out.opt("error")
	if out.err != nil {
		return nil, out.err
	}
	if raw, ok := top.fields["signature"]; ok && !bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
		sr, err := reader(raw, "signature")
		if err != nil {
			return nil, err
		}
		s := &Signature{}
		sr.get("algorithm", &s.Algorithm)
		sr.get("key_id", &s.KeyID)
		sr.get("public_key", &s.PublicKey)
		sr.get("signature", &s.Signature)
		if sr.err != nil {
			return nil, sr.err
		}
		r.Signature = s
	}
	return r, nil
}

func parseInvocation(raw json.RawMessage, inv *Invocation) error {
	ir, err := reader(raw, "invocation")
	if err != nil {
		return err
	}
	ir.get("mode", &inv.Mode)
	var in json.RawMessage
	ir.get("input", &in)
	if ir.err != nil {
		return ir.err
	}
	switch inv.Mode {
	case ModeRun:
		f, err := reader(in, "invocation.input")
		if err != nil {
			return err
		}
		r := &Run{}
		r.Command = f.strs("command")
		r.Image = f.opt("image")
		r.Backend = f.opt("backend")
		f.get("profile", &r.Profile)
		f.get("no_network", &r.NoNetwork)
		f.get("fast", &r.Fast)
		f.get("keep", &r.Keep)
		inv.Run = r
		return f.err
	case ModeExec:
		f, err := reader(in, "invocation.input")
		if err != nil {
			return err
		}
		x := &Exec{}
		f.get("name", &x.Name)
		x.Command = f.strs("command")
		x.Env = f.strs("env")
		x.Workdir = f.opt("workdir")
		f.get("sudo", &x.Sudo)
		inv.Exec = x
		return f.err
	}
	return badf("invocation.mode: %q is neither %q nor %q", inv.Mode, ModeRun, ModeExec)
}
