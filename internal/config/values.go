package config

import (
	"fmt"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Value is one effective setting, for 'agentkernel config show'.
type Value struct {
	// Key is the dotted key ("security.profile", "files[0].dest").
	Key string `json:"key"`
	// Value is the setting as JSON-friendly data (nil when unset).
	Value any `json:"value"`
	// Text is the value as TOML would write it, or "unset (profile
	// decides)"; secrets are masked.
	Text string `json:"text"`
	// Source is where it came from.
	Source Source `json:"source"`
	// NoEffect, when set, says why the key changes nothing in this
	// build (the schema accepts it for upstream's files).
	NoEffect string `json:"no_effect,omitempty"`
}

// unsetText marks values left to the security profile.
const unsetText = "unset (profile decides)"

// secretKeys are masked in Values.
func secretKey(key string) bool {
	return key == "api.api_key" || key == "orchestrator.nomad_token"
}

// Values lists every effective setting in schema order, with its source.
// Arrays of tables and tables of tables are listed element by element.
func (c *Config) Values() []Value {
	var out []Value
	c.walkValues(reflect.ValueOf(c).Elem(), "", &out)
	for i := range out {
		out[i].NoEffect = NoEffect(out[i].Key)
	}
	return out
}

func (c *Config) walkValues(rv reflect.Value, prefix string, out *[]Value) {
	fields, remain := fieldsOf(rv.Type())
	for _, f := range fields {
		c.walkValue(rv.Field(f.index), joinName(prefix, f.tag), out)
	}
	if remain >= 0 {
		m := rv.Field(remain)
		for _, k := range sortedMapKeys(m) {
			c.walkValues(m.MapIndex(reflect.ValueOf(k)), joinName(prefix, k), out)
		}
	}
}

func (c *Config) walkValue(fv reflect.Value, key string, out *[]Value) {
	t := fv.Type()
	switch {
	case isSection(t):
		c.walkValues(fv, key, out)
		return
	case t.Kind() == reflect.Slice && isSection(t.Elem()):
		if fv.Len() == 0 {
			*out = append(*out, Value{Key: key, Value: []any{}, Text: "[]", Source: c.Source(key)})
		}
		for i := 0; i < fv.Len(); i++ {
			c.walkValues(fv.Index(i), fmt.Sprintf("%s[%d]", key, i), out)
		}
		return
	case t.Kind() == reflect.Map && isSection(t.Elem()):
		if fv.Len() == 0 {
			*out = append(*out, Value{Key: key, Value: map[string]any{}, Text: "{}", Source: c.Source(key)})
		}
		for _, k := range sortedMapKeys(fv) {
			c.walkValues(fv.MapIndex(reflect.ValueOf(k)), joinName(key, k), out)
		}
		return
	}
	v := Value{Key: key, Source: c.Source(key)}
	v.Value, v.Text = render(fv, key)
	if secretKey(key) && v.Text != `""` {
		v.Value, v.Text = "********", `"********"`
	}
	*out = append(*out, v)
}

func sortedMapKeys(m reflect.Value) []string {
	keys := make([]string, 0, m.Len())
	for _, k := range m.MapKeys() {
		keys = append(keys, k.String())
	}
	sort.Strings(keys)
	return keys
}

// profileDecides are the keys whose zero value means "the profile decides".
func profileDecides(key string) bool {
	return strings.HasPrefix(key, "resources.") ||
		key == "security.seccomp"
}

// render returns a leaf as JSON-friendly data and as TOML text.
func render(fv reflect.Value, key string) (any, string) {
	switch x := fv.Interface().(type) {
	case Duration:
		if x == 0 {
			return nil, "unset (no timeout)"
		}
		s := time.Duration(x).String()
		return s, strconv.Quote(s)
	case CwdMount:
		if x == CwdUnset {
			return nil, unsetText
		}
		return string(x), strconv.Quote(string(x))
	case EnvPass:
		switch {
		case !x.Set:
			return nil, unsetText
		case !x.Enabled:
			return false, "false"
		case x.Names == nil:
			return true, "true"
		}
		return x.Names, renderList(x.Names)
	case *bool:
		if x == nil {
			return nil, unsetText
		}
		return *x, strconv.FormatBool(*x)
	case string:
		if x == "" && profileDecides(key) {
			return nil, unsetText
		}
		return x, strconv.Quote(x)
	case bool:
		return x, strconv.FormatBool(x)
	case int64:
		if x == 0 && key == "resources.disk_mb" {
			return nil, "unset (no limit)"
		}
		if x == 0 && profileDecides(key) {
			return nil, unsetText
		}
		return x, strconv.FormatInt(x, 10)
	case float64:
		if x == 0 && profileDecides(key) {
			return nil, unsetText
		}
		return x, strconv.FormatFloat(x, 'g', -1, 64)
	case []string:
		if x == nil {
			x = []string{}
		}
		return x, renderList(x)
	case map[string]string:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		parts := make([]string, len(keys))
		for i, k := range keys {
			parts[i] = joinName("", k) + " = " + strconv.Quote(x[k])
		}
		if x == nil {
			x = map[string]string{}
		}
		return x, "{" + strings.Join(parts, ", ") + "}"
	}
	return fv.Interface(), fmt.Sprint(fv.Interface())
}

func renderList(l []string) string {
	parts := make([]string, len(l))
	for i, s := range l {
		parts[i] = strconv.Quote(s)
	}
	return "[" + strings.Join(parts, ", ") + "]"
}
