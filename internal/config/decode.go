package config

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strings"

	"github.com/BurntSushi/toml"
)

// How the decoder works. The TOML library parses the file once into a
// tree of toml.Primitive values; the decoder walks that tree alongside the
// Config struct (by toml tags), so that it knows, for every key, whether
// the schema has it (else: a warning), its Go type (else: an error naming
// the expected type) and its line (keyLine). Leaves are decoded into a fresh
// value and then assigned, so a later layer replaces a list or a table of
// strings as a whole instead of merging into it.

// maxUnknownWarnings caps the warnings one file can produce.
const maxUnknownWarnings = 20

// maxProbes caps line look-ups (keyLine) per file: each costs a pass
// over the file inside the TOML library, and a hostile file can have very
// many keys.
const maxProbes = 256

type decoder struct {
	md     *toml.MetaData
	data   []byte
	path   string
	kind   SourceKind
	cfg    *Config
	order  map[string]int // key -> position in the document
	warns  []Warning
	extra  int // unknown keys beyond maxUnknownWarnings
	probes int
}

// apply decodes one file's contents into c, recording Sources.
func (c *Config) apply(data []byte, path string, kind SourceKind) (warns []Warning, err error) {
	data = bytes.TrimPrefix(data, []byte("\xef\xbb\xbf"))
	if err := checkText(data, path); err != nil {
		return nil, err
	}
	defer func() {
		// The TOML library is fuzzed upstream, but a configuration file
		// must never crash the program: turn any panic into an error.
		if r := recover(); r != nil {
			warns, err = nil, &Error{Path: path, Msg: fmt.Sprintf("cannot parse config file (internal error: %v)", r)}
		}
	}()

	var top map[string]toml.Primitive
	md, err := toml.Decode(string(data), &top)
	if err != nil {
		var pe toml.ParseError
		if errors.As(err, &pe) {
			ln := pe.Position.Line
			if s := pe.Position.Start; s > 0 && s < len(data) && data[s] == '\n' {
				// The lexer reports an error at a line's end ("got '\n'")
				// on the next line; the mistake is on this one.
				ln = lineAt(data, s)
			}
			return nil, &Error{Path: path, Line: ln, Msg: "invalid TOML: " + pe.Message}
		}
		return nil, &Error{Path: path, Msg: "invalid TOML: " + err.Error()}
	}
	c.Loaded = append(c.Loaded, Source{Kind: kind, Path: path})
	d := &decoder{md: &md, data: data, path: path, kind: kind, cfg: c, order: keyOrder(md.Keys())}
	if err := d.table(top, nil, "", reflect.ValueOf(c).Elem(), 0); err != nil {
		return d.warns, err
	}
	if d.extra > 0 {
		d.warns = append(d.warns, Warning{Path: path, Msg: fmt.Sprintf("%d more unknown keys (ignored)", d.extra)})
	}
	return d.warns, nil
}

// keyOrder numbers keys (and their implicit parent tables) in document
// order, so that walking a Go map visits keys as the user wrote them.
func keyOrder(keys []toml.Key) map[string]int {
	order := make(map[string]int, len(keys))
	for i, k := range keys {
		for j := 1; j <= len(k); j++ {
			s := k[:j].String()
			if _, ok := order[s]; !ok {
				order[s] = i
			}
		}
	}
	return order
}

func (d *decoder) sorted(prims map[string]toml.Primitive, parent toml.Key) []string {
	keys := make([]string, 0, len(prims))
	for k := range prims {
		keys = append(keys, k)
	}
	pos := func(k string) int {
		if p, ok := d.order[child(parent, k).String()]; ok {
			return p
		}
		return len(d.order)
	}
	sort.Slice(keys, func(i, j int) bool {
		pi, pj := pos(keys[i]), pos(keys[j])
		if pi != pj {
			return pi < pj
		}
		return keys[i] < keys[j]
	})
	return keys
}

func child(parent toml.Key, k string) toml.Key {
	out := make(toml.Key, len(parent), len(parent)+1)
	copy(out, parent)
	return append(out, k)
}

func joinName(name, k string) string {
	q := toml.Key{k}.String()
	if name == "" {
		return q
	}
	return name + "." + q
}

// fieldInfo describes one struct field for the walk.
type fieldInfo struct {
	tag   string
	index int
}

func fieldsOf(t reflect.Type) (fields []fieldInfo, remain int) {
	remain = -1
	for i := 0; i < t.NumField(); i++ {
		tag, _, _ := strings.Cut(t.Field(i).Tag.Get("toml"), ",")
		switch tag {
		case "", "-":
		case "*":
			remain = i
		default:
			fields = append(fields, fieldInfo{tag: tag, index: i})
		}
	}
	return fields, remain
}

// isSection: a struct decoded key by key (not a leaf type such as EnvPass).
func isSection(t reflect.Type) bool {
	return t.Kind() == reflect.Struct && !reflect.PointerTo(t).Implements(reflect.TypeFor[toml.Unmarshaler]())
}

// table walks one TOML table into the struct rv. line, when non-zero, is
// used for every key inside (elements of an array of tables, whose keys
// the library cannot place individually).
func (d *decoder) table(prims map[string]toml.Primitive, key toml.Key, name string, rv reflect.Value, line int) error {
	fields, remain := fieldsOf(rv.Type())
	for _, k := range d.sorted(prims, key) {
		ck, cn := child(key, k), joinName(name, k)
		var fi *fieldInfo
		for i := range fields {
			if fields[i].tag == k {
				fi = &fields[i]
				break
			}
		}
		switch {
		case fi != nil:
			if err := d.value(prims[k], ck, cn, rv.Field(fi.index), line); err != nil {
				return err
			}
		case remain >= 0:
			if err := d.mapEntry(prims[k], ck, cn, k, rv.Field(remain), line); err != nil {
				return err
			}
		default:
			d.unknown(prims[k], ck, cn, fields, line)
		}
	}
	return nil
}

// value decodes one key into fv.
func (d *decoder) value(p toml.Primitive, key toml.Key, name string, fv reflect.Value, line int) error {
	t := fv.Type()
	switch {
	case isSection(t):
		var sub map[string]toml.Primitive
		if !d.isTable(p) {
			return d.typeError(p, key, name, t, line, nil)
		}
		if err := d.md.PrimitiveDecode(p, &sub); err != nil {
			return d.typeError(p, key, name, t, line, err)
		}
		return d.table(sub, key, name, fv, line)

	case t.Kind() == reflect.Slice && isSection(t.Elem()):
		var elems []map[string]toml.Primitive
		if !d.isArrayOfTables(p) {
			return d.typeError(p, key, name, t, line, nil)
		}
		if err := d.md.PrimitiveDecode(p, &elems); err != nil {
			return d.typeError(p, key, name, t, line, err)
		}
		headers := d.arrayHeaders(key)
		if len(headers) != len(elems) {
			headers = nil // inline array, or a header we could not see
		}
		base := d.line(p, line)
		// A later layer replaces the whole array: forget the sources of
		// the elements it replaces.
		for k := range d.cfg.Sources {
			if strings.HasPrefix(k, name+"[") {
				delete(d.cfg.Sources, k)
			}
		}
		out := reflect.MakeSlice(t, len(elems), len(elems))
		for i, e := range elems {
			el := base
			if headers != nil {
				el = headers[i]
			}
			en := fmt.Sprintf("%s[%d]", name, i)
			d.cfg.Sources[en] = Source{Kind: d.kind, Path: d.path, Line: el}
			if err := d.table(e, key, en, out.Index(i), el); err != nil {
				return err
			}
		}
		fv.Set(out)
		d.cfg.Sources[name] = Source{Kind: d.kind, Path: d.path, Line: base}
		return nil

	case t.Kind() == reflect.Map && isSection(t.Elem()):
		var entries map[string]toml.Primitive
		if !d.isTable(p) {
			return d.typeError(p, key, name, t, line, nil)
		}
		if err := d.md.PrimitiveDecode(p, &entries); err != nil {
			return d.typeError(p, key, name, t, line, err)
		}
		for _, k := range d.sorted(entries, key) {
			if err := d.mapEntry(entries[k], child(key, k), joinName(name, k), k, fv, line); err != nil {
				return err
			}
		}
		return nil
	}

	if t.Kind() == reflect.Map && !d.isTable(p) {
		return d.typeError(p, key, name, t, line, nil)
	}
	nv := reflect.New(t)
	if err := d.md.PrimitiveDecode(p, nv.Interface()); err != nil {
		return d.typeError(p, key, name, t, line, err)
	}
	fv.Set(nv.Elem())
	d.cfg.Sources[name] = Source{Kind: d.kind, Path: d.path, Line: d.line(p, line)}
	return nil
}

// isTable reports whether p holds a table. Decoding a non-table into a
// map does not fail in the TOML library (it yields an empty map), so
// sections are checked on the raw value first.
func (d *decoder) isTable(p toml.Primitive) bool {
	var raw any
	if err := d.md.PrimitiveDecode(p, &raw); err != nil {
		return false
	}
	_, ok := raw.(map[string]any)
	return ok
}

// isArrayOfTables reports whether p holds [[x]] tables or an inline array
// of inline tables.
func (d *decoder) isArrayOfTables(p toml.Primitive) bool {
	var raw any
	if err := d.md.PrimitiveDecode(p, &raw); err != nil {
		return false
	}
	switch x := raw.(type) {
	case []map[string]any:
		return true
	case []any:
		for _, e := range x {
			if _, ok := e.(map[string]any); !ok {
				return false
			}
		}
		return true
	}
	return false
}

// mapEntry decodes one entry of a table of tables (daemon.agents, the
// secret bindings), merging into an existing entry of a lower layer.
func (d *decoder) mapEntry(p toml.Primitive, key toml.Key, name, k string, m reflect.Value, line int) error {
	if m.IsNil() {
		m.Set(reflect.MakeMap(m.Type()))
	}
	d.cfg.Sources[name] = Source{Kind: d.kind, Path: d.path, Line: d.line(p, line)}
	el := reflect.New(m.Type().Elem()).Elem()
	if old := m.MapIndex(reflect.ValueOf(k)); old.IsValid() {
		el.Set(old)
	}
	if err := d.value(p, key, name, el, line); err != nil {
		return err
	}
	m.SetMapIndex(reflect.ValueOf(k), el)
	return nil
}

// unknown records a warning for a key the schema does not have.
func (d *decoder) unknown(p toml.Primitive, key toml.Key, name string, fields []fieldInfo, line int) {
	if len(d.warns) >= maxUnknownWarnings {
		d.extra++
		return
	}
	msg := fmt.Sprintf("unknown key %q (ignored)", name)
	if s := suggest(key[len(key)-1], fields); s != "" {
		msg = fmt.Sprintf("unknown key %q (ignored; did you mean %q?)", name, s)
	}
	d.warns = append(d.warns, Warning{Path: d.path, Line: d.line(p, line), Key: name, Msg: msg})
}

// suggest returns the field name closest to k, if it is close enough to
// be a typo.
func suggest(k string, fields []fieldInfo) string {
	best, bestD := "", 3
	for _, f := range fields {
		if strings.EqualFold(f.tag, k) {
			return f.tag
		}
		if dist := EditDistance(strings.ToLower(k), f.tag); dist < bestD {
			best, bestD = f.tag, dist
		}
	}
	return best
}

// EditDistance is the Levenshtein distance of a and b (bytes; meant for
// short ASCII names, the suggestions of "did you mean"): past 64 bytes
// it answers a distance nothing is ever close enough at.
func EditDistance(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		return 1 << 30
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// keyLine is the 1-based line of p's key as the TOML library knows it (0
// when it knows none: an implicit table). BurntSushi/toml v1.6.0 records
// every key's position while parsing, but keeps it unexported (MetaData's
// keyInfo): MetaData offers Keys, Type, IsDefined and Undecoded, and no
// position. The position comes out only in the toml.ParseError of a
// decode that fails, which names the key being decoded. So p is decoded
// into a value whose UnmarshalTOML always fails, and the line is read
// from that error. Building the error costs a pass over the file (its
// column is computed from the whole document), hence maxProbes.
func keyLine(md *toml.MetaData, p toml.Primitive) int {
	var pe toml.ParseError
	if err := md.PrimitiveDecode(p, &failDecode{}); errors.As(err, &pe) {
		return pe.Position.Line
	}
	return 0
}

// failDecode fails to decode anything (keyLine).
type failDecode struct{}

func (*failDecode) UnmarshalTOML(any) error { return errors.New("position probe") }

// line returns the 1-based line of p's key, or fallback when it is
// non-zero (the keys of an element of an array of tables, which the
// library cannot place), or 0 once the probe budget is spent. An
// implicit table ("[a.b]" without "[a]") has no position of its own: it
// takes that of its first key.
func (d *decoder) line(p toml.Primitive, fallback int) int {
	if fallback > 0 {
		return fallback
	}
	if d.probes >= maxProbes {
		return 0
	}
	d.probes++
	if ln := keyLine(d.md, p); ln > 0 {
		return ln
	}
	var sub map[string]toml.Primitive
	if err := d.md.PrimitiveDecode(p, &sub); err == nil && len(sub) > 0 {
		first := ""
		for k := range sub {
			if first == "" || k < first {
				first = k
			}
		}
		return d.line(sub[first], 0)
	}
	return 0
}

// typeError explains a value of the wrong type (or a bad value rejected by
// a leaf type's UnmarshalTOML) at its line.
func (d *decoder) typeError(p toml.Primitive, key toml.Key, name string, want reflect.Type, line int, err error) error {
	e := &Error{Path: d.path, Line: d.line(p, line), Key: name}
	var pe toml.ParseError
	if errors.As(err, &pe) && reflect.PointerTo(want).Implements(reflect.TypeFor[toml.Unmarshaler]()) {
		e.Msg = pe.Message
		return e
	}
	got := d.md.Type(key...)
	if want.Kind() == reflect.Slice && got == "Array" {
		e.Msg = fmt.Sprintf("expected %s, but an element has another type", describe(want))
		return e
	}
	if want.Kind() == reflect.Map && got == "Hash" {
		e.Msg = fmt.Sprintf("expected %s, but a value has another type", describe(want))
		return e
	}
	e.Msg = fmt.Sprintf("expected %s, got %s", describe(want), describeTOML(got))
	return e
}

func describe(t reflect.Type) string {
	if isSection(t) {
		return "a table"
	}
	switch t.Kind() {
	case reflect.Pointer:
		return describe(t.Elem())
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int64, reflect.Int:
		return "an integer"
	case reflect.Float64:
		return "a number"
	case reflect.Slice:
		if isSection(t.Elem()) {
			return "an array of tables"
		}
		return "a list of " + strings.TrimPrefix(strings.TrimPrefix(describe(t.Elem()), "a "), "an ") + "s"
	case reflect.Map:
		if isSection(t.Elem()) {
			return "a table of tables"
		}
		return "a table of " + strings.TrimPrefix(strings.TrimPrefix(describe(t.Elem()), "a "), "an ") + "s"
	}
	return t.String()
}

func describeTOML(typ string) string {
	switch typ {
	case "Integer":
		return "an integer"
	case "Float":
		return "a float"
	case "String":
		return "a string"
	case "Bool":
		return "a boolean"
	case "Array":
		return "an array"
	case "Hash":
		return "a table"
	case "ArrayHash":
		return "an array of tables"
	case "Datetime":
		return "a date-time"
	}
	return "a value of another type"
}

// tomlTypeOf names the TOML type of a decoded value (for leaf types'
// UnmarshalTOML errors).
func tomlTypeOf(v any) string {
	switch v.(type) {
	case string:
		return "a string"
	case int64:
		return "an integer"
	case float64:
		return "a float"
	case bool:
		return "a boolean"
	case []any, []map[string]any:
		return "an array"
	case map[string]any:
		return "a table"
	}
	return "a date-time"
}

// arrayHeaders returns the lines of the [[key]] headers in document
// order. The library keeps one position per key, so elements of an array
// of tables are located by scanning for their headers; multi-line strings
// are skipped so that a header-like line inside one is not counted.
func (d *decoder) arrayHeaders(key toml.Key) []int {
	want := key.String()
	var lines []int
	sc := bufio.NewScanner(bytes.NewReader(d.data))
	sc.Buffer(make([]byte, 0, 64<<10), MaxFileSize+1)
	inML := "" // the delimiter of the multi-line string we are in
	for n := 1; sc.Scan(); n++ {
		s := sc.Text()
		if inML != "" {
			if strings.Count(s, inML)%2 == 1 {
				inML = ""
			}
			continue
		}
		for _, delim := range []string{`"""`, `'''`} {
			if strings.Count(s, delim)%2 == 1 {
				inML = delim
			}
		}
		t := strings.TrimSpace(s)
		if !strings.HasPrefix(t, "[[") {
			continue
		}
		end := strings.Index(t, "]]")
		if end < 0 {
			continue
		}
		if normalizeHeader(t[2:end]) == want {
			lines = append(lines, n)
		}
	}
	return lines
}

// normalizeHeader turns ` files ` or `"files"` into the dotted form
// toml.Key.String produces, for the simple keys of this schema.
func normalizeHeader(h string) string {
	parts := strings.Split(h, ".")
	for i, p := range parts {
		p = strings.TrimSpace(p)
		p = strings.Trim(p, `"'`)
		parts[i] = p
	}
	return toml.Key(parts).String()
}
