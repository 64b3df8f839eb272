package plugin

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
)

// pair is one member of a JSON object, kept in file order.
type pair struct {
	key string
	raw json.RawMessage
}

// parseObject reads a JSON object keeping its members' order. Empty
// input is an empty object.
func parseObject(b []byte) ([]pair, error) {
	if len(bytes.TrimSpace(b)) == 0 {
		return nil, nil
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, errors.New("not a JSON object")
	}
	var out []pair
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		key, _ := tok.(string)
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, err
		}
		out = append(out, pair{key, raw})
	}
	if _, err := dec.Token(); err != nil { // the closing brace
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("data after the top-level object")
	}
	return out, nil
}

// encodeObject writes pairs as an indented object whose closing brace is
// at depth.
func encodeObject(pairs []pair, depth int) []byte {
	if len(pairs) == 0 {
		return []byte("{}")
	}
	in := strings.Repeat("  ", depth+1)
	var b bytes.Buffer
	b.WriteString("{\n")
	for i, p := range pairs {
		k, _ := json.Marshal(p.key)
		b.WriteString(in)
		b.Write(k)
		b.WriteString(": ")
		var v bytes.Buffer
		if err := json.Indent(&v, p.raw, in, "  "); err != nil {
			b.Write(p.raw)
		} else {
			b.Write(v.Bytes())
		}
		if i < len(pairs)-1 {
			b.WriteByte(',')
		}
		b.WriteByte('\n')
	}
	b.WriteString(strings.Repeat("  ", depth))
	b.WriteByte('}')
	return b.Bytes()
}

func find(pairs []pair, key string) int {
	for i, p := range pairs {
		if p.key == key {
			return i
		}
	}
	return -1
}

func jsonEqual(a json.RawMessage, b any) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil {
		return false
	}
	bb, _ := json.Marshal(b)
	_ = json.Unmarshal(bb, &y)
	return reflect.DeepEqual(x, y)
}

// mergeJSON prepares setting key (two levels: table, entry) to value in
// the JSON file at path, keeping every other member and their order; it
// writes nothing (Install commits the change). A file that is not valid
// JSON is refused, never overwritten.
func mergeJSON(path string, key []string, value any, o *Options) (Change, error) {
	old, existed, mode, err := readExisting(path)
	if err != nil {
		return Change{}, err
	}
	c := Change{Path: path, Detail: strings.Join(key, ".")}
	top, err := parseObject(old)
	if err != nil {
		return Change{}, fmt.Errorf("not valid JSON (%v): fix or move the file, agentkernel will not overwrite it", err)
	}
	val, _ := json.Marshal(value)
	var inner []pair
	i := find(top, key[0])
	if i >= 0 {
		if inner, err = parseObject(top[i].raw); err != nil {
			return Change{}, fmt.Errorf("%q is not a JSON object: agentkernel will not overwrite it", key[0])
		}
	}
	j := find(inner, key[1])
	compact := func(r []byte) string {
		var b bytes.Buffer
		_ = json.Compact(&b, r)
		return b.String()
	}
	switch {
	case j >= 0 && jsonEqual(inner[j].raw, value):
		c.Action = Unchanged
		return c, nil
	case j >= 0 && !o.Force:
		c.Action, c.Detail = Skipped, fmt.Sprintf("%s exists with other settings (use --force to overwrite)", strings.Join(key, "."))
		return c, nil
	case j >= 0:
		c.Action = Replaced
		c.Diff = fmt.Sprintf("- %s: %s\n+ %s: %s", strings.Join(key, "."), compact(inner[j].raw), strings.Join(key, "."), val)
		inner[j].raw = val
	default:
		c.Action = Merged
		if !existed {
			c.Action = Created
		}
		c.Diff = fmt.Sprintf("+ %s: %s", strings.Join(key, "."), val)
		inner = append(inner, pair{key[1], val})
	}
	innerRaw := encodeObject(inner, 1)
	if i >= 0 {
		top[i].raw = innerRaw
	} else {
		top = append(top, pair{key[0], innerRaw})
	}
	content := append(encodeObject(top, 0), '\n')
	c.write = &pending{path: path, old: old, existed: existed, mode: mode, content: content}
	return c, nil
}

// jsonHasKey reports whether the object in b has key (two levels).
func jsonHasKey(b []byte, key []string) (bool, error) {
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		return false, err
	}
	t, ok := m[key[0]].(map[string]any)
	if !ok {
		return false, nil
	}
	_, ok = t[key[1]]
	return ok, nil
}
