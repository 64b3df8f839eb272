package mcp

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"unicode/utf8"
)

// Incoming messages are vetted here before the SDK sees them. The SDK's
// stdio transport ends the whole session at the first line it cannot
// decode (a json.Decoder syntax error stops its read loop, and an
// ioConn.Read error from jsonrpc2.DecodeMessage — a wrong "jsonrpc", an
// id of the wrong type, a non-object — ends jsonrpc2's readIncoming), and
// even trailing spaces after a message end it ("invalid trailing data").
// Over HTTP it answers such bodies with a plain-text 400. So every
// message is checked against JSON-RPC 2.0 as MCP uses it, answered with a
// JSON-RPC error when it fails, and otherwise handed on re-encoded by
// encoding/json: the SDK only ever decodes well-formed messages that this
// package produced.

// MaxMessageBytes bounds one incoming message: a line on stdio, a request
// body over HTTP. It leaves room for sandbox_file_write of files of a few
// MiB; larger messages are answered with an error and dropped.
const MaxMessageBytes = 8 << 20

// maxDepth bounds the nesting of a message (the SDK refuses more than
// 1000 levels with an error that would end a stdio session).
const maxDepth = 128

// JSON-RPC 2.0 error codes.
const (
	codeParseError     = -32700
	codeInvalidRequest = -32600
)

// vetted is the outcome of checking one message.
type vetted struct {
	// msg is the message re-encoded for the SDK (no trailing newline);
	// nil when it was refused or blank.
	msg []byte
	// reply is the JSON-RPC error answering a refused message.
	reply []byte
	// id is the request's id as idKey gives it ("" for notifications,
	// responses and refused messages).
	id string
}

// vet checks one message. A blank one (white space only) gives a zero
// vetted.
func vet(data []byte) vetted {
	data = bytes.TrimSpace(data)
	if len(data) == 0 {
		return vetted{}
	}
	if !utf8.Valid(data) {
		return refuse(nil, codeParseError, "Parse error: the message is not UTF-8 text")
	}
	if !json.Valid(data) {
		err := json.Unmarshal(data, new(any))
		if err == nil {
			err = errors.New("not valid JSON")
		}
		return refuse(nil, codeParseError, "Parse error: "+jsonError(err))
	}
	if d := depth(data); d > maxDepth {
		return refuse(nil, codeInvalidRequest, fmt.Sprintf("Invalid Request: the message nests %d levels deep (at most %d)", d, maxDepth))
	}
	switch data[0] {
	case '{':
	case '[':
		return refuse(nil, codeInvalidRequest, "Invalid Request: batches (JSON arrays) are not supported; send one JSON-RPC message per line")
	default:
		return refuse(nil, codeInvalidRequest, "Invalid Request: a JSON-RPC message is a JSON object")
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(data, &fields); err != nil {
		return refuse(nil, codeInvalidRequest, "Invalid Request: "+jsonError(err))
	}

	// The id first, so that the other errors can name it.
	rawID, hasID := fields["id"]
	var id []byte
	if hasID {
		var err error
		if id, err = canonicalID(rawID); err != nil {
			return refuse(nil, codeInvalidRequest, "Invalid Request: "+err.Error())
		}
	}
	if v, ok := fields["jsonrpc"]; !ok || string(bytes.TrimSpace(v)) != `"2.0"` {
		return refuse(id, codeInvalidRequest, `Invalid Request: "jsonrpc" must be "2.0"`)
	}

	var b bytes.Buffer
	b.WriteString(`{"jsonrpc":"2.0"`)
	if id != nil {
		b.WriteString(`,"id":`)
		b.Write(id)
	}
	rawMethod, isRequest := fields["method"]
	_, hasResult := fields["result"]
	_, hasError := fields["error"]
	if isRequest {
		var method string
		if !isString(rawMethod) || json.Unmarshal(rawMethod, &method) != nil {
			return refuse(id, codeInvalidRequest, `Invalid Request: "method" must be a string`)
		}
		if hasResult || hasError {
			return refuse(id, codeInvalidRequest, `Invalid Request: a request carries "method", not "result" or "error"`)
		}
		m, _ := marshal(method)
		b.WriteString(`,"method":`)
		b.Write(m)
		if p, ok := fields["params"]; ok && !isNull(p) {
			if !isStructured(p) {
				return refuse(id, codeInvalidRequest, `Invalid Request: "params" must be an object (or an array)`)
			}
			if err := writeValue(&b, "params", p); err != nil {
				return refuse(id, codeInvalidRequest, "Invalid Request: "+err.Error())
			}
		}
	} else {
		// A response to one of the server's requests (roots, sampling,
		// elicitation, ping).
		switch {
		case id == nil:
			return refuse(nil, codeInvalidRequest, `Invalid Request: a message without "method" is a response and needs the "id" of the request it answers`)
		case hasResult == hasError:
			return refuse(id, codeInvalidRequest, `Invalid Request: a response carries exactly one of "result" and "error"`)
		case hasResult:
			if err := writeValue(&b, "result", fields["result"]); err != nil {
				return refuse(id, codeInvalidRequest, "Invalid Request: "+err.Error())
			}
		default:
			e, err := canonicalError(fields["error"])
			if err != nil {
				return refuse(id, codeInvalidRequest, "Invalid Request: "+err.Error())
			}
			b.WriteString(`,"error":`)
			b.Write(e)
		}
	}
	b.WriteByte('}')
	v := vetted{msg: b.Bytes()}
	if isRequest && id != nil {
		v.id = idKey(id)
	}
	return v
}

// refuse answers a refused message; id is its canonical id, nil for null.
func refuse(id []byte, code int, message string) vetted {
	return vetted{reply: errorResponse(id, code, message)}
}

// errorResponse is a JSON-RPC error response (id nil: null).
func errorResponse(id []byte, code int, message string) []byte {
	if id == nil {
		id = []byte("null")
	}
	type wireError struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	}
	b, _ := marshal(struct {
		JSONRPC string          `json:"jsonrpc"`
		ID      json.RawMessage `json:"id"`
		Error   wireError       `json:"error"`
	}{"2.0", id, wireError{code, message}})
	return b
}

// canonicalID accepts a string or an integer id (MCP: never null) and
// returns it re-encoded.
func canonicalID(raw json.RawMessage) ([]byte, error) {
	raw = bytes.TrimSpace(raw)
	switch {
	case isNull(raw):
		return nil, errors.New(`"id" must be a string or an integer, not null`)
	case isString(raw):
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, err
		}
		return marshal(s)
	case len(raw) > 0 && (raw[0] == '-' || raw[0] >= '0' && raw[0] <= '9'):
		if n, err := strconv.ParseInt(string(raw), 10, 64); err == nil {
			return []byte(strconv.FormatInt(n, 10)), nil
		}
		// 1e3 and 7.0 are integers too; 1.5 and 1e30 are not ids.
		f, err := strconv.ParseFloat(string(raw), 64)
		if err == nil && f == math.Trunc(f) && math.Abs(f) <= 1<<53 {
			return []byte(strconv.FormatInt(int64(f), 10)), nil
		}
		return nil, fmt.Errorf(`"id" %s is not an integer`, raw)
	}
	return nil, errors.New(`"id" must be a string or an integer`)
}

// idKey identifies an id across its encodings (canonical or the SDK's).
func idKey(raw []byte) string {
	c, err := canonicalID(raw)
	if err != nil {
		return ""
	}
	return string(c)
}

// canonicalError checks a response's error object: an integer code, a
// string message, any data.
func canonicalError(raw json.RawMessage) ([]byte, error) {
	var e map[string]json.RawMessage
	if !isObject(raw) || json.Unmarshal(raw, &e) != nil {
		return nil, errors.New(`"error" must be an object with "code" and "message"`)
	}
	code, err := canonicalID(e["code"])
	if err != nil || isString(e["code"]) {
		return nil, errors.New(`"error.code" must be an integer`)
	}
	var msg string
	if !isString(e["message"]) || json.Unmarshal(e["message"], &msg) != nil {
		return nil, errors.New(`"error.message" must be a string`)
	}
	var b bytes.Buffer
	m, _ := marshal(msg)
	fmt.Fprintf(&b, `{"code":%s,"message":%s`, code, m)
	if d, ok := e["data"]; ok {
		if err := writeValue(&b, "data", d); err != nil {
			return nil, err
		}
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// writeValue appends ,"key":value with value re-encoded by encoding/json
// (numbers kept as written).
func writeValue(b *bytes.Buffer, key string, raw json.RawMessage) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return fmt.Errorf("%q: %s", key, jsonError(err))
	}
	out, err := marshal(v)
	if err != nil {
		return fmt.Errorf("%q: %v", key, err)
	}
	fmt.Fprintf(b, `,%q:`, key)
	b.Write(out)
	return nil
}

// marshal is json.Marshal without HTML escaping.
func marshal(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

func isNull(raw []byte) bool   { return string(bytes.TrimSpace(raw)) == "null" }
func isString(raw []byte) bool { raw = bytes.TrimSpace(raw); return len(raw) > 0 && raw[0] == '"' }
func isObject(raw []byte) bool { raw = bytes.TrimSpace(raw); return len(raw) > 0 && raw[0] == '{' }
func isStructured(raw []byte) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) > 0 && (raw[0] == '{' || raw[0] == '[')
}

// depth is the deepest nesting of arrays and objects in valid JSON.
func depth(data []byte) int {
	d, most := 0, 0
	inString, escaped := false, false
	for _, c := range data {
		switch {
		case inString:
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
		case c == '"':
			inString = true
		case c == '{' || c == '[':
			d++
			most = max(most, d)
		case c == '}' || c == ']':
			d--
		}
	}
	return most
}

// jsonError words a decoding error without Go type names.
func jsonError(err error) string {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		return fmt.Sprintf("%s (at byte %d)", se.Error(), se.Offset)
	case errors.As(err, &te):
		return fmt.Sprintf("a JSON %s where %s was expected", te.Value, jsonKind(te.Type.Kind().String()))
	}
	return err.Error()
}

func jsonKind(goKind string) string {
	switch goKind {
	case "map", "struct":
		return "an object"
	case "slice", "array":
		return "an array"
	case "string":
		return "a string"
	}
	return "another type"
}
