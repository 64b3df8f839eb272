package plugin

import (
	"bytes"
	"fmt"
	"reflect"
	"regexp"
	"strings"
	"sync"

	"github.com/BurntSushi/toml"
)

// codexHeader matches the header of our table and of its subtables
// ([mcp_servers.agentkernel], [mcp_servers.agentkernel.env], quoted
// forms too).
// (Compiled on first use: package inits run on every start of the binary,
// sandbox inits included.)
var codexHeader = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`^\s*\[\s*(mcp_servers|"mcp_servers")\s*\.\s*(agentkernel|"agentkernel")\s*(\.[^\]]*)?\]\s*(#.*)?$`)
})

// anyHeader matches any table or array-of-tables header.
var anyHeader = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^\s*\[`) })

func codexBlock(command string) string {
	return fmt.Sprintf("[mcp_servers.agentkernel]\n# written by 'agentkernel plugin install codex': sandboxed command execution\ncommand = %q\nargs = [\"mcp-server\"]\n", command)
}

type codexFile struct {
	MCPServers map[string]map[string]any `toml:"mcp_servers"`
}

func codexEntry(b []byte) (map[string]any, bool, error) {
	var f codexFile
	if _, err := toml.Decode(string(b), &f); err != nil {
		return nil, false, err
	}
	e, ok := f.MCPServers[ServerName]
	return e, ok, nil
}

func codexHasServer(b []byte) bool {
	_, ok, _ := codexEntry(b)
	return ok
}

// mergeCodexTOML prepares adding or replacing our [mcp_servers.agentkernel]
// table in Codex's config.toml (Install commits it) as text, so that the user's comments, order and
// formatting survive (a TOML encoder would drop the comments). The file
// is parsed before and after to make sure it stays valid and holds
// exactly our entry.
func mergeCodexTOML(path string, o *Options) (Change, error) {
	old, existed, mode, err := readExisting(path)
	if err != nil {
		return Change{}, err
	}
	c := Change{Path: path, Detail: "mcp_servers.agentkernel"}
	cur, has, err := codexEntry(old)
	if err != nil {
		return Change{}, fmt.Errorf("not valid TOML (%v): fix the file, agentkernel will not overwrite it", err)
	}
	want := map[string]any{"command": o.command(), "args": []any{"mcp-server"}}
	block := codexBlock(o.command())
	var content string
	switch {
	case has && reflect.DeepEqual(cur, want):
		c.Action = Unchanged
		return c, nil
	case has && !o.Force:
		c.Action, c.Detail = Skipped, "[mcp_servers.agentkernel] exists with other settings (use --force to overwrite)"
		return c, nil
	case has:
		var removed string
		content, removed = replaceCodexTables(string(old), block)
		if removed == "" {
			return Change{}, fmt.Errorf("mcp_servers.agentkernel is defined inline, not as a [mcp_servers.agentkernel] table: edit it by hand")
		}
		c.Action = Replaced
		c.Diff = prefixLines("- ", removed) + "\n" + prefixLines("+ ", block)
	default:
		s := string(old)
		switch {
		case s == "":
		case strings.HasSuffix(s, "\n\n"):
		case strings.HasSuffix(s, "\n"):
			s += "\n"
		default:
			s += "\n\n"
		}
		content = s + block
		c.Action = Merged
		if !existed {
			c.Action = Created
		}
		c.Diff = prefixLines("+ ", block)
	}
	got, ok, err := codexEntry([]byte(content))
	if err != nil || !ok || !reflect.DeepEqual(got, want) {
		return Change{}, fmt.Errorf("could not place [mcp_servers.agentkernel] safely (%v): add it by hand:\n%s", err, block)
	}
	c.write = &pending{path: path, old: old, existed: existed, mode: mode, content: []byte(content)}
	return c, nil
}

// replaceCodexTables swaps the first [mcp_servers.agentkernel…] table for
// block and drops its subtables. A table's text runs from its header to
// its last key line, so comments and blank lines before the next table
// stay where they are. removed is the text taken out ("" when there was
// no such table).
func replaceCodexTables(s, block string) (out, removed string) {
	ls := strings.SplitAfter(s, "\n")
	var b, rm strings.Builder
	placed := false
	for i := 0; i < len(ls); {
		if !codexHeader().MatchString(strings.TrimRight(ls[i], "\r\n")) {
			b.WriteString(ls[i])
			i++
			continue
		}
		// ls[i] is our header: find the end of its body.
		end := i + 1
		last := i
		for end < len(ls) && !anyHeader().MatchString(ls[end]) {
			t := strings.TrimSpace(ls[end])
			if t != "" && !strings.HasPrefix(t, "#") {
				last = end
			}
			end++
		}
		for _, l := range ls[i : last+1] {
			rm.WriteString(l)
		}
		if !placed {
			b.WriteString(block)
			placed = true
		}
		i = last + 1
	}
	return b.String(), strings.TrimRight(rm.String(), "\n")
}

func prefixLines(p, s string) string {
	var b bytes.Buffer
	for i, l := range strings.Split(strings.TrimRight(s, "\n"), "\n") {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(p + l)
	}
	return b.String()
}
