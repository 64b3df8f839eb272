package config

import (
	"reflect"
	"slices"
	"testing"

	"github.com/BurntSushi/toml"
)

// TestTOMLKeyPositions: keyLine finds keys' lines by a failing decode
// because the TOML library has no public way to ask for them. The method
// set of toml.MetaData is pinned here: when an upgrade adds a method,
// see whether it gives key positions, and if so use it and delete
// keyLine.
func TestTOMLKeyPositions(t *testing.T) {
	var methods []string
	typ := reflect.TypeFor[*toml.MetaData]()
	for i := range typ.NumMethod() {
		methods = append(methods, typ.Method(i).Name)
	}
	if want := []string{"IsDefined", "Keys", "PrimitiveDecode", "Type", "Undecoded"}; !slices.Equal(methods, want) {
		t.Errorf("toml.MetaData's methods are now %v (were %v): does one give key positions?", methods, want)
	}

	const doc = "# a comment\n\nname = \"x\"\n\n[sandbox]\n  image = \"alpine\"\n[a.b]\nc = 1\n"
	var top map[string]toml.Primitive
	md, err := toml.Decode(doc, &top)
	if err != nil {
		t.Fatal(err)
	}
	var sb, a map[string]toml.Primitive
	if err := md.PrimitiveDecode(top["sandbox"], &sb); err != nil {
		t.Fatal(err)
	}
	if err := md.PrimitiveDecode(top["a"], &a); err != nil {
		t.Fatal(err)
	}
	for what, c := range map[string]struct {
		p    toml.Primitive
		want int
	}{
		"name":          {top["name"], 3},
		"[sandbox]":     {top["sandbox"], 5},
		"sandbox.image": {sb["image"], 6},
		"[a.b]":         {a["b"], 7},
		"a (implicit)":  {top["a"], 0},
	} {
		if got := keyLine(&md, c.p); got != c.want {
			t.Errorf("%s: line %d, want %d", what, got, c.want)
		}
	}
}
