package mcp

import (
	"bytes"
	"encoding/json"
	"testing"
)

// FuzzVet: whatever a client sends, vet either refuses it with a
// JSON-RPC error or hands on one line that decodes as the SDK decodes a
// message (jsonrpc2.DecodeMessage's wire shape: "2.0", a string or
// integer id, a string method, an error object with an integer code).
func FuzzVet(f *testing.F) {
	for _, s := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`,
		`{"jsonrpc":"2.0","id":"x","method":"tools/call","params":{"name":"sandbox_run","arguments":{"command":["echo","\u2028<&>"]}}}`,
		`{"jsonrpc":"2.0","method":"notifications/initialized"}`,
		`{"jsonrpc":"2.0","id":3,"result":{"roots":[]}}`,
		`{"jsonrpc":"2.0","id":3,"error":{"code":-1,"message":"no","data":[1,2]}}`,
		`{"jsonrpc":"2.0","id":1e2,"method":"ping"}`,
		`{"jsonrpc":"2.0","id":-0,"method":"ping","params":[]}`,
		`{"jsonrpc":"2.0","id":"\ud800","method":"\u0000"}`,
		`{"jsonrpc":"2.0","JSONRPC":"1.0","id":1,"ID":2,"method":"ping"}`,
		`{"jsonrpc":"2.0","id":1,"method":"ping","params":{"a":1.5e308,"b":-0.0}}`,
		`garbage`, `{}`, `[]`, `42`, `"s"`, `null`, `{"jsonrpc":"2.0","id":1,"method":"tools/li`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		v := vet(data)
		switch {
		case v.reply != nil:
			if v.msg != nil {
				t.Fatal("both a message and a reply")
			}
			var r struct {
				JSONRPC string          `json:"jsonrpc"`
				ID      json.RawMessage `json:"id"`
				Error   struct {
					Code    int64  `json:"code"`
					Message string `json:"message"`
				} `json:"error"`
			}
			if err := json.Unmarshal(v.reply, &r); err != nil || r.JSONRPC != "2.0" || (r.Error.Code != codeParseError && r.Error.Code != codeInvalidRequest) || bytes.ContainsRune(v.reply, '\n') {
				t.Fatalf("reply %s: %v", v.reply, err)
			}
		case v.msg != nil:
			if bytes.ContainsAny(v.msg, "\n\r") || !json.Valid(v.msg) || depth(v.msg) > maxDepth {
				t.Fatalf("message %q", v.msg)
			}
			if len(v.msg) > 2*len(data)+64 {
				t.Fatalf("message grew from %d to %d bytes", len(data), len(v.msg))
			}
			var w struct {
				VersionTag string          `json:"jsonrpc"`
				ID         any             `json:"id,omitempty"`
				Method     json.RawMessage `json:"method"`
				Params     json.RawMessage `json:"params,omitempty"`
				Result     json.RawMessage `json:"result,omitempty"`
				Error      *struct {
					Code    int64            `json:"code"`
					Message string           `json:"message"`
					Data    *json.RawMessage `json:"data"`
				} `json:"error,omitempty"`
			}
			dec := json.NewDecoder(bytes.NewReader(v.msg))
			dec.UseNumber()
			if err := dec.Decode(&w); err != nil || w.VersionTag != "2.0" {
				t.Fatalf("message %s: %v", v.msg, err)
			}
			switch id := w.ID.(type) {
			case nil, string:
			case json.Number:
				if _, err := id.Int64(); err != nil {
					t.Fatalf("message %s: id %v", v.msg, id)
				}
			default:
				t.Fatalf("message %s: id %T", v.msg, id)
			}
			var method string
			if w.Method != nil && json.Unmarshal(w.Method, &method) != nil {
				t.Fatalf("message %s: method", v.msg)
			}
			if w.Method == nil && w.ID == nil {
				t.Fatalf("message %s: a response without an id", v.msg)
			}
			// Vetting is idempotent: the SDK's input is already canonical.
			if again := vet(v.msg); !bytes.Equal(again.msg, v.msg) {
				t.Fatalf("not canonical: %s then %s", v.msg, again.msg)
			}
		default:
			if len(bytes.TrimSpace(data)) != 0 {
				t.Fatalf("%q passed as blank", data)
			}
		}
	})
}
